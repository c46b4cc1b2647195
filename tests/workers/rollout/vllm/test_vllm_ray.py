"""``rollout.name=vllm`` on Ray (CPU build): 2 FSDP2 actor workers, the engine colocated in each, or
vLLM + LoRA on a rollout pool of its own (``hybrid_engine=false``).

On Ray the engines live in worker processes the test cannot reach, so what is checked comes from
the run's own metrics: the engine sampled with exactly the trained weights (the per-token
``training/rollout_probs_diff_max`` between the engine's log-probs and the actor's recompute
≤ 1e-3, as the local vLLM tests; after an lr 1e-2 LoRA update a stale adapter differs by ~1), the
sync moved the whole state once and then only the adapter, and the sampled tokens and rewards
equal the same run on the local backend (the 2 FSDP2 ranks differ from one process by float32
reduction order only).
"""

from __future__ import annotations

import math

import pytest
from run_helpers import read_metrics

from tests.trainer.ppo.test_split_rollout import assert_same_metrics
from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS, split_vllm_overrides
from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [*VLLM_MARKS, pytest.mark.e2e, pytest.mark.ray]
LORA = {
    "actor_rollout_ref.model.lora_rank": 4,
    "actor_rollout_ref.model.lora_alpha": 8,
    "actor_rollout_ref.actor.optim.lr": 1e-2,
}
# 2 FSDP2 ranks vs 1 process: float32 reduction order only (the hf Ray tests measure <= 9.5e-7)
TOL = 1e-5


def _assert_on_policy(metrics: dict[int, dict]) -> None:
    for step, m in metrics.items():
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float)), step
        assert m["training/rollout_probs_diff_max"] <= 1e-3, (step, m["training/rollout_probs_diff_max"])
        assert abs(m["actor/ppo_kl"]) < 1e-5, (step, m["actor/ppo_kl"])


def _assert_same_run(local: dict[int, dict], ray: dict[int, dict]) -> None:
    for step in local:  # same weights up to rounding, same per-row seeds: same tokens, same rewards
        for key in ("critic/score/mean", "response_length/mean"):
            assert ray[step][key] == local[step][key], (step, key)
    assert_same_metrics(local, ray, tol=TOL, b_may_add=True)


def test_vllm_colocated_in_two_ray_workers_matches_the_local_run(tmp_path):
    runs = {}
    for name, extra in (("local", {}), ("ray", {"trainer.n_gpus_per_node": 2})):
        trainer = RLTrainer(config=load_config(None, split_vllm_overrides(tmp_path / name, **extra)))
        try:
            trainer.fit()
        finally:
            if name == "local" and trainer.parts is not None:  # the in-process engine is the test's to close
                trainer.parts.actor_rollout_wg.workers[0].rollout.engine.close()
            trainer.close()
        runs[name] = read_metrics(tmp_path / name)
    _assert_on_policy(runs["ray"])
    _assert_same_run(runs["local"], runs["ray"])


def test_vllm_lora_on_a_separate_ray_pool_syncs_only_the_adapter(tmp_path):
    split = {"actor_rollout_ref.hybrid_engine": False, **LORA}
    runs = {}
    for name, extra in (
        ("local", {}),
        ("ray", {"trainer.n_gpus_per_node": 2, "actor_rollout_ref.rollout.n_gpus_per_node": 1}),
    ):
        trainer = RLTrainer(config=load_config(None, split_vllm_overrides(tmp_path / name, **split, **extra)))
        try:
            trainer.fit()  # closes the separate rollout's engines (SplitActorRollout.shutdown)
        finally:
            trainer.close()
        runs[name] = read_metrics(tmp_path / name)
    ray = runs["ray"]
    _assert_on_policy(ray)
    full = ray[1]["weight_sync/tensors"]
    print(
        "weight_sync/tensors and megabytes per step:",
        [(ray[s]["weight_sync/tensors"], ray[s]["weight_sync/megabytes"]) for s in ray],
    )
    assert full == runs["local"][1]["weight_sync/tensors"]  # the first sync: the whole state
    for step in (2, 3):  # later syncs: only the adapter (the local LoRA test counts 28 of its tensors)
        assert 0 < ray[step]["weight_sync/tensors"] < full, (step, ray[step]["weight_sync/tensors"], full)
        assert ray[step]["weight_sync/tensors"] == runs["local"][step]["weight_sync/tensors"]
        assert ray[step]["weight_sync/megabytes"] < 0.2 * ray[1]["weight_sync/megabytes"]
    _assert_same_run(runs["local"], ray)
