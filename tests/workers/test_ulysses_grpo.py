"""A 3-step GRPO run with Ulysses sequence parallelism (2 Ray workers, sp=2: one data-parallel rank
whose sequences are split over both) equals the sp=1 run in one local process.

Both have one data-parallel rank, so the mini-batches hold the same rows; the rollouts are the
same (per-row sampling seeds), only the training forwards differ in layout. Compared per step: the
actor's loss, entropy, KL to the reference, gradient norm and PPO KL, and the reference log-probs
through the KL metric (the reference runs split as the actor).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
KEYS = (
    "actor/pg_loss",
    "actor/entropy",
    "actor/kl_loss",
    "actor/grad_norm",
    "actor/ppo_kl",
    "critic/score/mean",
    "response_length/mean",
)


def _run(model_dir: Path, run_dir: Path, sp: int) -> dict[int, dict]:
    extra = {
        "trainer.total_training_steps": 3,
        "trainer.n_gpus_per_node": sp,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.calculate_entropy": True,
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size": sp,
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size": sp,
        "trainer.balance_batch": False,
    }  # balancing reorders rows over the world's ranks: other mini-batches
    RLTrainer(config=load_config(None, tiny_run_overrides(model_dir, run_dir, **extra))).fit()
    return read_metrics(run_dir)


def test_grpo_three_steps_sp2_equals_sp1(tiny_model_dir: Path, tmp_path: Path) -> None:
    sp1 = _run(tiny_model_dir, tmp_path / "sp1", 1)
    sp2 = _run(tiny_model_dir, tmp_path / "sp2", 2)
    assert sp1[3]["actor/grad_norm"] > 0
    for step in (1, 2, 3):
        for key in KEYS:
            assert sp2[step][key] == pytest.approx(sp1[step][key], abs=1e-4, rel=1e-4), (step, key)


def test_gae_two_steps_actor_and_critic_sp2_equal_sp1(tiny_model_dir: Path, tmp_path: Path) -> None:
    """PPO with a critic: the critic's values (after its first update) and losses at sp=2 equal sp=1."""
    keys = (
        "critic/vf_loss",
        "critic/grad_norm",
        "critic/values/mean",
        "critic/vpred_mean",
        "actor/pg_loss",
        "actor/grad_norm",
    )
    runs = {}
    for sp in (1, 2):
        extra = {
            "algorithm.adv_estimator": "gae",
            "trainer.total_training_steps": 2,
            "trainer.n_gpus_per_node": sp,
            "actor_rollout_ref.rollout.n": 1,
            "critic.optim.lr": 1e-3,
            "critic.model.use_remove_padding": True,
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size": sp,
            "critic.ulysses_sequence_parallel_size": sp,
            "trainer.balance_batch": False,
        }
        RLTrainer(config=load_config(None, tiny_run_overrides(tiny_model_dir, tmp_path / f"sp{sp}", **extra))).fit()
        runs[sp] = read_metrics(tmp_path / f"sp{sp}")
    assert abs(runs[1][2]["critic/values/mean"]) > 1e-4  # the critic moved
    for step in (1, 2):
        for key in keys:
            assert runs[2][step][key] == pytest.approx(runs[1][step][key], abs=1e-4, rel=1e-4), (step, key)
