"""Load-time rules of ``*.fsdp_config.tensor_parallel_size`` (config/tp_checks.py): one-line errors
naming the numbers, and the mini-batch checks over the data-parallel size world / tp."""

from __future__ import annotations

import pytest

from verl.config import load_config
from verl.config.errors import ConfigError

TP = "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size"
BASE = [
    "trainer.n_gpus_per_node=4",
    "algorithm.adv_estimator=grpo",
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


def test_tp_loads_for_actor_and_critic():
    cfg = load_config(None, [*BASE, f"{TP}=2"])
    assert cfg.actor_rollout_ref.actor.fsdp_config.tensor_parallel_size == 2
    cfg = load_config(
        None,
        [
            *BASE,
            "algorithm.adv_estimator=gae",
            "critic.model.fsdp_config.tensor_parallel_size=2",
            "critic.ppo_mini_batch_size=2",
        ],
    )
    assert cfg.critic.model.fsdp_config.tensor_parallel_size == 2


def test_tp_must_divide_the_world():
    assert "tensor_parallel_size=3 must divide the world size 4" in _error(f"{TP}=3")


SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
PACKED = "actor_rollout_ref.model.use_remove_padding=true"


def test_tp_with_sp_loads_and_sp_x_tp_must_divide_the_world():
    cfg = load_config(None, [*BASE, f"{TP}=2", f"{SP}=2", PACKED])
    assert (
        cfg.actor_rollout_ref.actor.fsdp_config.tensor_parallel_size,
        cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size,
    ) == (2, 2)
    msg = _error(f"{TP}=2", f"{SP}=4", PACKED)  # each divides 4, their product 8 does not
    assert "tensor_parallel_size=2 x ulysses_sequence_parallel_size=4 = 8 must divide the world size 4" in msg


def test_mini_batch_is_checked_over_world_over_sp_x_tp():
    # world 8, 1 prompt x n=2 = 2 trajectories per mini-batch: fine over dp = 8 / (2 x 2), not over dp = 8 / 2
    eight = ["trainer.n_gpus_per_node=8", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=1"]
    load_config(None, [*BASE, *eight, f"{TP}=2", f"{SP}=2", PACKED])
    assert "not divisible" in _error(*eight, f"{TP}=2")


def test_tp_on_the_ref_is_refused():
    assert "not supported yet" in _error("actor_rollout_ref.ref.fsdp_config.tensor_parallel_size=2")


def test_mini_batch_is_checked_over_world_over_tp():
    # 1 prompt x n=2 = 2 trajectories: fine over dp = 4 / 2, not over the whole world of 4
    load_config(None, [*BASE, f"{TP}=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    assert "not divisible" in _error("actor_rollout_ref.actor.ppo_mini_batch_size=1")


ROLLOUT_TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def test_hf_rollout_tp_loads_and_is_checked():
    cfg = load_config(None, [*BASE, f"{ROLLOUT_TP}=2"])
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert "tensor_model_parallel_size=3 must divide the world size 4" in _error(f"{ROLLOUT_TP}=3")


def test_hf_rollout_tp_on_its_own_pool_divides_the_pool():
    split = ["actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.n_gpus_per_node=2"]
    cfg = load_config(None, [*BASE, f"{ROLLOUT_TP}=2", *split])
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert "must divide the rollout pool's world size 2" in _error(f"{ROLLOUT_TP}=4", *split)
    local = [
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.hybrid_engine=false",
    ]
    assert "rollout pool's world size 1" in _error(f"{ROLLOUT_TP}=2", *local)  # in process: one rollout worker


def test_seed_layout_tensor_model_parallel_size_reaches_the_trained_models_only():
    from verl.config import translate_seed_layout

    out = translate_seed_layout({"fsdp_config": {"sharding_strategy": "FULL_SHARD", "tensor_model_parallel_size": 2}})
    assert out["actor_rollout_ref"]["actor"]["fsdp_config"]["tensor_parallel_size"] == 2
    assert out["critic"]["model"]["fsdp_config"]["tensor_parallel_size"] == 2
    assert "tensor_parallel_size" not in out["actor_rollout_ref"]["ref"]["fsdp_config"]
    assert "tensor_parallel_size" not in out["reward_model"]["model"]["fsdp_config"]
    actor_only = translate_seed_layout({"model": {"actor": {"fsdp_config": {"tensor_model_parallel_size": 2}}}})
    assert actor_only["actor_rollout_ref"]["actor"]["fsdp_config"]["tensor_parallel_size"] == 2
    assert "critic" not in actor_only


def test_tp_with_lora_loads_for_the_actor_and_is_refused_for_the_critic():
    cfg = load_config(None, [*BASE, f"{TP}=2", "actor_rollout_ref.model.lora_rank=4"])
    assert cfg.actor_rollout_ref.model.lora_rank == 4
    msg = _error(
        "algorithm.adv_estimator=gae",
        "critic.model.fsdp_config.tensor_parallel_size=2",
        "critic.ppo_mini_batch_size=2",
        "critic.model.lora_rank=4",
    )
    assert "not supported yet" in msg and "critic.model.lora_rank" in msg


def test_tp_on_the_ref_loads_at_the_actors_degree():
    cfg = load_config(None, [*BASE, f"{TP}=2", "actor_rollout_ref.ref.fsdp_config.tensor_parallel_size=2"])
    assert cfg.actor_rollout_ref.ref.fsdp_config.tensor_parallel_size == 2
    msg = _error(
        f"{TP}=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.ref.fsdp_config.tensor_parallel_size=2",
    )
    assert "not supported yet" in msg and "set it to 1 or 4" in msg
