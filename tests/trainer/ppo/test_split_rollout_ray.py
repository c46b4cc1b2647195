"""``hybrid_engine=false`` on Ray: 2 FSDP2 actor workers (gloo) + a rollout pool of its own.

Compared with the same run on the local backend (one actor, one in-process rollout worker).
"""

from __future__ import annotations

import pytest
from run_helpers import read_metrics
from tests.trainer.ppo.test_split_rollout import assert_same_metrics, builtin_overrides, comparable

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
SPLIT = {
    "actor_rollout_ref.hybrid_engine": False,
    "trainer.total_training_steps": 2,
    "trainer.test_freq": 2,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
}
# measured (loaded shared CPU): 2 FSDP2 ranks vs 1 process differ by float32 reduction order only,
# max abs diff 9.5e-7 over every compared metric; the sampled tokens are identical (per-row seeds),
# so rewards and lengths are exact. 1e-5 leaves 10x headroom for another BLAS thread count.
TOL = 1e-5


def test_two_actor_workers_and_a_separate_rollout_pool_match_the_local_run(tmp_path):
    local = tmp_path / "local"
    RLTrainer(config=load_config(None, builtin_overrides(local, **SPLIT))).fit()
    ray_dir = tmp_path / "ray"
    trainer = RLTrainer(config=load_config(None, builtin_overrides(ray_dir, **SPLIT, **{"trainer.n_gpus_per_node": 2})))
    parts = trainer._parts()
    group = parts.actor_rollout_wg
    assert group.rollout_wg.world_size == 2 and len(parts.resource_pools) == 2  # the rollout's own pool
    assert group.rollout_wg.pool is not group.actor_wg.pool
    assert not set(group.rollout_wg.worker_pids()) & set(group.actor_wg.worker_pids())
    trainer.fit()
    a, b = read_metrics(local), read_metrics(ray_dir)
    for step in (1, 2):
        assert b[step]["timing_s/update_weights"] > 0
        assert b[step]["critic/score/mean"] == a[step]["critic/score/mean"]  # same tokens, same rewards
    print(
        "max abs diff local vs Ray:",
        max(abs(v - b[s][k]) for s in a for k, v in comparable(a[s]).items() if isinstance(v, float) and v == v),
    )
    print(
        "timing_s/update_weights local / Ray:",
        [(a[s]["timing_s/update_weights"], b[s]["timing_s/update_weights"]) for s in a],
    )
    assert_same_metrics(a, b, tol=TOL, b_may_add=True)


def test_many_buckets_by_reference_on_ray_equal_one_local_bucket(tmp_path, tiny_model_dir):
    """Each of several 1 MiB buckets goes from actor rank 0's object store to the 1-worker rollout pool."""
    from pathlib import Path

    from run_helpers import tiny_run_overrides

    from verl.modules import init_model

    with pytest.MonkeyPatch.context() as mp:  # ~3.3 MB in fp32, MLP matrices of 0.75 MB: 1 MiB buckets split it
        mp.setitem(
            init_model.SIZES, "wide1", {"hidden": 256, "layers": 1, "heads": 8, "kv_heads": 4, "intermediate": 768}
        )
        model = init_model.init_random_model(
            "llama", "wide1", Path(tiny_model_dir).parent / "tokenizer", tmp_path / "wide1", seed=0
        )
    runs = {}
    for name, extra in (
        ("local", {}),
        (
            "ray",
            {
                "trainer.n_gpus_per_node": 2,
                "actor_rollout_ref.rollout.n_gpus_per_node": 1,
                "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 1,
            },
        ),
    ):
        d = tmp_path / name
        RLTrainer(
            config=load_config(
                None, tiny_run_overrides(model, d, **{"actor_rollout_ref.hybrid_engine": False, **extra})
            )
        ).fit()
        runs[name] = read_metrics(d)
    assert runs["local"][2]["weight_sync/buckets"] == 1 and runs["ray"][2]["weight_sync/buckets"] >= 4
    assert runs["ray"][2]["weight_sync/megabytes"] == pytest.approx(runs["local"][2]["weight_sync/megabytes"])
    assert_same_metrics(runs["local"], runs["ray"], tol=TOL, b_may_add=True)
