"""``colocate_async`` on Ray (2 FSDP2 hybrid actor-rollout workers) at warm-up 0 / threshold 0
equals the local one-worker ``colocate_async`` run step for step (float32 reduction order aside)."""

from __future__ import annotations

import pytest
from run_helpers import read_metrics
from tests.trainer.ppo.test_split_rollout import assert_same_metrics, builtin_overrides

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.trainer.async_rl import build_async_loop

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.ray]  # 139 s on the shared 2-core machine
ON_POLICY = {
    "trainer.v1.trainer_mode": "colocate_async",
    "trainer.v1.colocate_async.num_warmup_batches": 0,
    "trainer.v1.sampler.max_off_policy_threshold": 0,
    "trainer.total_training_steps": 2,
    "trainer.test_freq": -1,
    "data.val_files": "[]",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
}


def test_warmup_zero_on_two_ray_workers_equals_the_local_colocate_async_run(tmp_path):
    RLTrainer(config=load_config(None, builtin_overrides(tmp_path / "local", **ON_POLICY))).fit()
    trainer = RLTrainer(
        config=load_config(None, builtin_overrides(tmp_path / "ray", **{**ON_POLICY, "trainer.n_gpus_per_node": 2}))
    )
    try:
        assert trainer._parts().actor_rollout_wg.world_size == 2
        loop = build_async_loop(trainer)
        assert loop.engine is None  # the engines live in the workers' processes: nothing to hook
        loop.run()
    finally:
        trainer.close()
    local, ray = read_metrics(tmp_path / "local"), read_metrics(tmp_path / "ray")
    assert assert_same_metrics(local, ray, tol=1e-5, b_may_add=True) > 50
    assert any(abs(local[s]["actor/pg_loss"]) > 1e-4 for s in local)  # the policy really moved
    for step in (1, 2):
        assert ray[step]["training/off_policy/trajectory_staleness/max"] == 0.0
        assert ray[step]["colocate_async/long_tail_cut"] == 0.0
