"""verl's sft_trainer_engine.yaml keys load onto the SFT schema; unknown / unsupported / mixed keys fail in one line."""

from __future__ import annotations

import pytest

from verl.config import ConfigError
from verl.config.sft_loader import load_sft_config

BASE = ["model.path=builtin://tiny-arithmetic", "data.train_files=t.parquet", "data.messages_key=messages"]


def test_engine_layout_maps_onto_the_sft_schema() -> None:
    cfg = load_sft_config(
        None,
        [
            *BASE,
            "engine=fsdp",
            "model=hf_model",
            "optim=fsdp",
            "data.tools_key=tool_list",
            "data.enable_thinking_key=think",
            "data.enable_thinking_default=false",
            "data.pad_mode=right",
            "model.use_remove_padding=false",
            "data.use_dynamic_bsz=false",
            "data.max_token_len_per_gpu=128",
            "optim.lr=2e-4",
            "optim.lr_warmup_steps_ratio=0.2",
            "optim.lr_scheduler_type=cosine",
            "optim.min_lr_ratio=0.1",
            "engine.model_dtype=bf16",
            "engine.param_offload=true",
            "checkpoint.save_contents=[model,hf_model]",
            "trainer.test_freq=after_each_epoch",
            "data.train_max_samples=3",
            "model.custom_chat_template='{{ messages }}'",
            "+data.apply_chat_template_kwargs.x=1",
        ],
    )
    d, mt = cfg.data, cfg.data.multiturn
    assert mt.enable and (mt.messages_key, mt.tools_key, mt.enable_thinking_key) == ("messages", "tool_list", "think")
    assert mt.enable_thinking_default is False and mt.apply_chat_template_kwargs == {"x": 1}
    assert (d.use_dynamic_bsz, d.max_token_len_per_gpu, d.train_max_samples) == (False, 128, 3)
    assert cfg.use_remove_padding is False and d.chat_template == "{{ messages }}"
    assert cfg.model.partial_pretrain == "builtin://tiny-arithmetic"
    assert (cfg.optim.lr, cfg.optim.warmup_steps_ratio, cfg.optim.lr_scheduler, cfg.optim.min_lr_ratio) == (
        2e-4,
        0.2,
        "cosine",
        0.1,
    )
    assert cfg.model.fsdp_config.model_dtype == "bf16" and cfg.model.fsdp_config.offload_params
    assert (
        cfg.checkpoint.save_contents == ["model", "hf_model"] == cfg.checkpoint.load_contents
    )  # ${checkpoint.save_contents}
    assert cfg.trainer.test_freq == "after_each_epoch"


def test_engine_layout_takes_verls_defaults() -> None:
    """Defaults are those of verl's composed sft_trainer_engine.yaml, not of the older layout."""
    cfg = load_sft_config(None, BASE)
    assert (cfg.optim.lr, cfg.optim.lr_scheduler, cfg.optim.betas, cfg.optim.zero_indexed_step) == (
        1e-3,
        "constant",
        [0.9, 0.999],
        True,
    )
    assert cfg.data.use_dynamic_bsz and cfg.data.max_token_len_per_gpu == 8192 and cfg.use_remove_padding
    assert cfg.model.enable_gradient_checkpointing and cfg.checkpoint.save_contents == ["model", "optimizer", "extra"]
    assert cfg.data.multiturn.enable_thinking_default is None  # verl's 'none'
    assert cfg.trainer.logger == ["console", "wandb"] and cfg.trainer.default_local_dir == "checkpoints/gsm8k-sft/test"
    old = load_sft_config(None, ["model.partial_pretrain=builtin://tiny-arithmetic"])
    assert old.optim.lr == 1e-5 and not old.data.multiturn.enable and "hf_model" in old.checkpoint.save_contents


@pytest.mark.parametrize(
    "override, message",
    [
        ("engine.fsdp_sise=2", "did you mean 'engine.fsdp_size'"),
        ("engine.fsdp_size=2", "`engine.fsdp_size=2` is not supported yet"),
        ("engine=megatron", "`engine=megatron` is not supported yet"),
        ("model.lora_adapter_path=/x", "`model.lora_adapter_path` is not supported yet"),
        ("optim.optimizer=SGD", "`optim.optimizer` is not supported yet"),
        ("trainer.profile_interval=[1,2]", "`trainer.profile_interval` is not supported yet"),
        ("profiler.enable=true", "`profiler.enable` is not supported yet"),
        ("+model._target_=verl.workers.config.FSDPEngineConfig", "model._target_"),
        ("model.partial_pretrain=/m", "use one layout"),
        ("data.pad_mode=left", "data.pad_mode: must be no_padding | right"),
        ("checkpoint.save_contents=[optimizer]", "`checkpoint.save_contents` without model is not supported yet"),
    ],
)
def test_engine_layout_refusals_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_sft_config(None, [*BASE, override])


def test_noop_keys_are_accepted_at_any_value() -> None:
    cfg = load_sft_config(
        None,
        [
            *BASE,
            "engine.use_torch_compile=false",
            "data.num_workers=0",
            "engine.seed=3",
            "data.ignore_input_ids_mismatch=true",
            "trainer.balance_batch=false",
            "engine.reshard_after_forward=false",
            "model.mtp.method=x",
            "engine.dtype=bfloat16",
            "engine.fsdp_size=1",
        ],
    )  # the world size (verl's run_sft_engine.sh sets it)
    assert cfg.data.multiturn.enable
    with pytest.raises(ConfigError, match="trains SFT only"):
        load_sft_config(None, BASE, algorithm="dpo")
