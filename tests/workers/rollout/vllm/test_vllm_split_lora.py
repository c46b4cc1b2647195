"""``rollout.name=vllm`` + LoRA with ``hybrid_engine=false``: the adapter path on the rollout's own group.

3 GRPO steps of the built-in task (CPU build). After every sync the engine's log-probs of a fixed
sequence equal the actor's (LoRA applied; max abs diff <= 1e-3 as the other vLLM tests), the
first sync carries the whole state and the later ones only the adapter tensors, and the metrics
equal the colocated vLLM + LoRA run's (measured max abs diff 0.0 over every metric, both the
offline engine and the async one). Measured on a loaded shared CPU machine: ~40 s / ~80 s.
"""

from __future__ import annotations

import math

import pytest
from run_helpers import read_metrics

from tests.trainer.ppo.test_split_rollout import assert_same_metrics, comparable
from tests.workers.rollout.vllm.vllm_helpers import FIXED, VLLM_MARKS, actor_log_probs, split_vllm_overrides
from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [*VLLM_MARKS, pytest.mark.e2e]
LORA = {
    "actor_rollout_ref.model.lora_rank": 4,
    "actor_rollout_ref.model.lora_alpha": 8,
    "actor_rollout_ref.actor.optim.lr": 1e-2,
}


@pytest.mark.parametrize(
    "mode", ["sync", "async"]
)  # offline LLM (buckets by reference) / async engine (buckets via /dev/shm)
def test_vllm_lora_on_its_own_worker_group_syncs_only_the_adapter(tmp_path, mode):
    from verl.trainer.ppo.split_rollout import SplitActorRollout

    diffs: list[float] = []
    off: list[float] = []  # engine vs the actor without its adapter
    seen: list[tuple[int, int, int]] = []  # per sync: tensors, adapter tensors, state-dict entries
    original = SplitActorRollout.sync_weights

    def checked(self, force=False):
        seconds = original(self, force)
        if seconds:
            engine, actor = self.rollout_wg.workers[0].engine, self.actor_wg.workers[0].actor_engine.module
            scored = engine.score(FIXED)
            diffs.append(float((scored - actor_log_probs(actor)).abs().max()))
            with actor.disable_adapter():
                off.append(float((scored - actor_log_probs(actor)).abs().max()))
            adapter = sum(1 for p in actor.parameters() if p.requires_grad)
            seen.append((int(self.last_sync["tensors"]), adapter, len(actor.state_dict())))
        return seconds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SplitActorRollout, "sync_weights", checked)
        trainer = RLTrainer(
            config=load_config(
                None,
                split_vllm_overrides(
                    **LORA,
                    run_dir=tmp_path / "split",
                    **{"actor_rollout_ref.hybrid_engine": False, "actor_rollout_ref.rollout.mode": mode},
                ),
            )
        )
        trainer.fit()  # closes the in-process engine (SplitActorRollout.shutdown)
    print(
        "engine vs actor log-prob max abs diff per sync:", diffs, "vs the base alone:", off, "tensors per sync:", seen
    )
    assert len(diffs) == 3 and max(diffs) <= 1e-3, diffs  # the sync before each of the 3 generations
    assert min(off[1:]) > 0.1, off  # measured ~1.0 and ~1.4: the engine really applies the trained adapter
    assert seen[0][0] == seen[0][2] and all(t == a < n for t, a, n in seen[1:]), (
        seen
    )  # full once, then the adapter only
    split = read_metrics(tmp_path / "split")
    full_mb = split[1]["weight_sync/megabytes"]
    print("weight_sync/megabytes per step:", [split[s]["weight_sync/megabytes"] for s in (1, 2, 3)])
    for step, m in split.items():
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        assert m["training/rollout_probs_diff_max"] <= 1e-3, (step, m["training/rollout_probs_diff_max"])
        assert abs(m["actor/ppo_kl"]) < 1e-5  # on-policy: the engine sampled with the actor's adapter
    assert split[1]["weight_sync/tensors"] == seen[0][2]  # step 1 reports the first (full) sync
    for step in (2, 3):  # the sync before steps 2 and 3: only the adapter
        assert split[step]["weight_sync/tensors"] == seen[0][1]
        assert split[step]["weight_sync/megabytes"] < 0.2 * full_mb, (
            step,
            split[step]["weight_sync/megabytes"],
            full_mb,
        )
    colocated_trainer = RLTrainer(
        config=load_config(
            None,
            split_vllm_overrides(**LORA, run_dir=tmp_path / "colocated", **{"actor_rollout_ref.rollout.mode": mode}),
        )
    )
    try:
        colocated_trainer.fit()
    finally:
        colocated_trainer.parts.actor_rollout_wg.workers[0].rollout.engine.close()
    colocated = read_metrics(tmp_path / "colocated")
    diff = max(
        abs(v - split[s][k])
        for s in colocated
        for k, v in comparable(colocated[s]).items()
        if isinstance(v, float) and not math.isnan(v)
    )
    print("max abs diff colocated vs separate vLLM + LoRA:", diff)
    for step in (1, 2, 3):  # same weights and adapter, same per-row seeds: same tokens and rewards
        for key in ("critic/score/mean", "response_length/mean"):
            assert split[step][key] == colocated[step][key], (step, key)
    assert_same_metrics(colocated, split, tol=1e-6)
