"""``rollout.name=vllm`` with ``hybrid_engine=false``: vLLM on its own worker group (CPU build).

3 GRPO steps of the built-in task; after every sync the engine's log-probs of a fixed sequence
equal the actor's (fp32, max abs diff <= 1e-3 as the colocated vLLM test), the engine samples
on-policy, and the metrics equal the colocated vLLM run's (same weights, same per-row seeds).
"""

from __future__ import annotations

import math

import pytest
from run_helpers import read_metrics

from tests.trainer.ppo.test_split_rollout import assert_same_metrics
from tests.workers.rollout.vllm.vllm_helpers import FIXED, VLLM_MARKS, actor_log_probs, split_vllm_overrides
from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [*VLLM_MARKS, pytest.mark.e2e]


def test_vllm_on_its_own_worker_group_generates_with_the_trained_weights(tmp_path):
    from verl.trainer.ppo.split_rollout import SplitActorRollout

    diffs: list[float] = []
    original = SplitActorRollout.sync_weights

    def checked(self, force=False):
        seconds = original(self, force)
        if seconds:
            engine = self.rollout_wg.workers[0].engine
            diffs.append(
                float((engine.score(FIXED) - actor_log_probs(self.actor_wg.workers[0].actor_engine.module)).abs().max())
            )
        return seconds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SplitActorRollout, "sync_weights", checked)
        trainer = RLTrainer(
            config=load_config(
                None, split_vllm_overrides(tmp_path / "split", **{"actor_rollout_ref.hybrid_engine": False})
            )
        )
        trainer.fit()  # closes the in-process engine (SplitActorRollout.shutdown)
    assert len(diffs) == 3 and max(diffs) <= 1e-3, diffs  # the sync before each of the 3 generations
    split = read_metrics(tmp_path / "split")
    for m in split.values():
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        assert m["timing_s/update_weights"] > 0 and m["training/rollout_probs_diff_max"] <= 1e-3
        assert m["weight_sync/buckets"] == 1  # the built-in model is 0.5 MB
        assert abs(m["actor/ppo_kl"]) < 1e-5  # on-policy: the engine sampled from the actor's weights
    colocated_trainer = RLTrainer(config=load_config(None, split_vllm_overrides(tmp_path / "colocated")))
    try:
        colocated_trainer.fit()
    finally:
        colocated_trainer.parts.actor_rollout_wg.workers[0].rollout.engine.close()
    colocated = read_metrics(tmp_path / "colocated")
    # same weights, same per-row seeds: same tokens and rewards; measured max abs diff 0.0 over every metric
    for step in (1, 2, 3):
        for key in ("critic/score/mean", "response_length/mean"):
            assert split[step][key] == colocated[step][key], (step, key)
    from tests.trainer.ppo.test_split_rollout import comparable

    print(
        "max abs diff colocated vs separate vLLM:",
        max(
            abs(v - split[s][k])
            for s in colocated
            for k, v in comparable(colocated[s]).items()
            if isinstance(v, float) and v == v
        ),
    )
    assert_same_metrics(colocated, split, tol=1e-6)
    print("update_weights s:", [split[s]["timing_s/update_weights"] for s in (1, 2, 3)])
