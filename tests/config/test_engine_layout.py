"""verl's Megatron / TorchTitan / VeOmni engine sections mapped onto the FSDP2 engine
(verl.config.engine_layout): the mapped values, the no-op keys, and the one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.config import ConfigError, load_config

VERL_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "verl_config"
CPU = ["trainer.device=cpu", "actor_rollout_ref.rollout.name=hf"]


def _load(name: str, *overrides: str):
    return load_config(VERL_CONFIG / f"_generated_ppo_{name}_trainer.yaml", [*CPU, *overrides])


def test_megatron_optimizer_and_engine_keys_map_onto_fsdp2():
    cfg = _load(
        "megatron",
        "actor_rollout_ref.actor.optim.lr=3e-6",
        "actor_rollout_ref.actor.optim.min_lr=3e-7",
        "actor_rollout_ref.actor.optim.lr_decay_style=cosine",
        "actor_rollout_ref.actor.optim.clip_grad=0.5",
        "actor_rollout_ref.actor.optim.weight_decay=0.1",
        "actor_rollout_ref.actor.megatron.param_offload=true",
        "critic.megatron.optimizer_offload=true",
    )
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == "fsdp2" and actor.optim.lr == 3e-6  # optim.optimizer=AdamW: verl's default, accepted
    assert actor.optim.lr_scheduler_type == "cosine" and actor.optim.min_lr_ratio == pytest.approx(0.1)
    assert actor.optim.clip_grad == 0.5 and actor.optim.weight_decay == 0.1
    assert actor.fsdp_config.param_offload is True and actor.fsdp_config.mixed_precision in ("bf16", "bfloat16")
    assert cfg.critic.model.fsdp_config.optimizer_offload is True and cfg.actor_rollout_ref.ref.strategy == "fsdp2"


def test_torchtitan_schedule_and_veomni_floor():
    tt = _load("torchtitan", "actor_rollout_ref.actor.optim.min_lr_factor=0.2").actor_rollout_ref.actor.optim
    assert tt.lr_scheduler_type == "linear" and tt.min_lr_ratio == 0.2 and tt.eps == 1e-8
    vo = _load("veomni", "actor_rollout_ref.actor.optim.lr_min=5e-7").actor_rollout_ref.actor.optim
    assert vo.lr_scheduler_type == "cosine" and vo.min_lr_ratio == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("name", "override", "key"),
    [
        (
            "megatron",
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
        ),
        ("megatron", "critic.megatron.tensor_model_parallel_size=2", "critic.megatron.tensor_model_parallel_size"),
        (
            "megatron",
            "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size",
        ),
        (
            "torchtitan",
            "actor_rollout_ref.actor.torchtitan.context_parallel_size=2",
            "actor_rollout_ref.actor.torchtitan.context_parallel_size",
        ),
        (
            "veomni",
            "actor_rollout_ref.actor.veomni.expert_parallel_size=2",
            "actor_rollout_ref.actor.veomni.expert_parallel_size",
        ),
        ("megatron", "actor_rollout_ref.actor.optim.optimizer=muon", "actor_rollout_ref.actor.optim.optimizer"),
        (
            "megatron",
            "actor_rollout_ref.actor.megatron.use_dist_checkpointing=true",
            "actor_rollout_ref.actor.megatron.use_dist_checkpointing",
        ),
        (
            "veomni",
            "actor_rollout_ref.actor.veomni.attn_implementation=sdpa",
            "actor_rollout_ref.actor.veomni.attn_implementation",
        ),
    ],
)
def test_non_data_parallel_or_non_default_keys_are_refused_by_name(name, override, key):
    with pytest.raises(ConfigError, match=rf"^`{key.replace('.', chr(92) + '.')}` is not supported yet"):
        _load(name, override)


def test_torchtitan_tensor_parallel_size_is_the_products_tensor_parallelism():
    cfg = _load("torchtitan", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.torchtitan.tensor_parallel_size=2")
    assert cfg.actor_rollout_ref.actor.fsdp_config.tensor_parallel_size == 2
