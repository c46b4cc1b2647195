"""``separate_async`` on Ray (2 FSDP2 actor workers + a rollout pool of its own) at staleness 0
equals the local synchronous split-pool run step for step (float32 reduction order aside)."""

from __future__ import annotations

import pytest
from run_helpers import read_metrics
from tests.trainer.ppo.test_split_rollout import assert_same_metrics, builtin_overrides

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
BASE = {
    "actor_rollout_ref.hybrid_engine": False,
    "trainer.total_training_steps": 2,
    "trainer.test_freq": -1,
    "data.val_files": "[]",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
}
ON_POLICY = {
    "trainer.v1.trainer_mode": "separate_async",
    "trainer.v1.separate_async.parameter_sync_step": 1,
    "trainer.v1.separate_async.num_warmup_batches": 0,
    "trainer.v1.sampler.max_off_policy_threshold": 0,
}


def test_staleness_zero_on_ray_equals_the_local_synchronous_split_pool_run(tmp_path):
    RLTrainer(config=load_config(None, builtin_overrides(tmp_path / "local", **BASE))).fit()
    ray_run = {**BASE, **ON_POLICY, "trainer.n_gpus_per_node": 2}
    trainer = RLTrainer(config=load_config(None, builtin_overrides(tmp_path / "ray", **ray_run)))
    assert trainer._parts().actor_rollout_wg.rollout_wg.world_size == 2  # the rollout's own Ray pool
    trainer.fit()
    local, ray = read_metrics(tmp_path / "local"), read_metrics(tmp_path / "ray")
    assert assert_same_metrics(local, ray, tol=1e-5, b_may_add=True) > 50
    assert all(ray[s]["training/off_policy/trajectory_staleness/max"] == 0.0 for s in (1, 2))
