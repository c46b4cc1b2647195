"""Load-time rules of ``*.ulysses_sequence_parallel_size`` (config/sp_checks.py): one-line errors
naming the numbers, and the mini-batch checks over the data-parallel size world / sp."""

from __future__ import annotations

import pytest

from verl.config import load_config
from verl.config.errors import ConfigError

SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
BASE = [
    "trainer.n_gpus_per_node=4",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.model.use_remove_padding=true",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.rollout.n=2",
]


def _error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, [*BASE, *overrides])
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_sp_must_divide_the_world():
    assert "ulysses_sequence_parallel_size=3 must divide the world size 4" in _error(f"{SP}=3")


def test_sp_needs_packed_forwards():
    msg = _error(f"{SP}=2", "actor_rollout_ref.model.use_remove_padding=false")
    assert "needs actor_rollout_ref.model.use_remove_padding=true" in msg


def test_ref_follows_the_actor_or_runs_whole_sequences():
    assert "use the actor's 2 (split) or 1" in _error(
        f"{SP}=2", "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4"
    )
    for ref in (1, 2):
        cfg = load_config(None, [*BASE, f"{SP}=2", f"actor_rollout_ref.ref.ulysses_sequence_parallel_size={ref}"])
        assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2


def test_mini_batch_is_checked_over_world_over_sp():
    # world 4, sp 4: dp 1, so a mini-batch of 1 prompt x n 2 = 2 trajectories splits fine; sp 1 refuses it
    ok = load_config(None, [*BASE, f"{SP}=4", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    assert ok.actor_rollout_ref.actor.ppo_mini_batch_size == 1
    msg = _error("actor_rollout_ref.actor.ppo_mini_batch_size=1")
    assert "is not divisible by the world size 4" in msg
    # dp 2: a micro-batch of 3 does not divide the per-rank mini-batch 2 x 2 / 2 = 2
    msg = _error(f"{SP}=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3")
    assert (
        "per-device mini-batch 2 (= actor_rollout_ref.actor.ppo_mini_batch_size 2 x rollout.n 2 / data-parallel size 2)"
        in msg
    )


def test_padded_only_forward_and_reward_model_sp_are_refused():
    msg = _error(
        f"{SP}=2",
        "actor_rollout_ref.actor.calculate_sum_pi_squared=true",
        "algorithm.adv_estimator=optimal_token_baseline",
    )
    assert "calculate_sum_pi_squared` is not supported yet" in msg
    assert "`reward_model.ulysses_sequence_parallel_size` is not supported yet" in _error(
        "reward_model.ulysses_sequence_parallel_size=2"
    )


def test_preflight_refuses_heads_not_divisible_by_sp(tiny_model_dir):
    """The tiny model has 4 heads and 2 KV heads: sp=4 divides the world 4 but not the KV heads."""
    from verl.run.preflight import check_model

    cfg = load_config(None, [*BASE, f"{SP}=4", f"actor_rollout_ref.model.path={tiny_model_dir}"])
    with pytest.raises(
        ConfigError, match="ulysses_sequence_parallel_size=4 does not divide the model's num_key_value_heads=2"
    ):
        check_model(cfg)
    check_model(load_config(None, [*BASE, f"{SP}=2", f"actor_rollout_ref.model.path={tiny_model_dir}"]))
