"""The tables of `verl.config.sft_engine_layout`: verl's ``sft_trainer_engine.yaml`` keys, defaults and states.

``DEFAULTS`` are the values of verl's composed layout (``sft_trainer_engine.yaml`` with
``model/hf_model.yaml``, ``engine/fsdp.yaml``, ``optim/fsdp.yaml``); nested blocks read only by
features that are off (``model.mtp``, ``model.lora``, ``engine.qat``, ``engine.turbo_config``,
``profiler``) are matched by `NOOP` patterns instead of being listed leaf by leaf.
"""

from __future__ import annotations

from typing import Any

_SAME = "a speed/memory optimisation in verl that computes the same values"

GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("hf_model",),
    "engine": ("fsdp",),
    "optim": ("fsdp",),
    "profiler": ("profiler",),
}

TARGETS = {
    "model": "verl.workers.config.HFModelConfig",
    "engine": "verl.workers.config.FSDPEngineConfig",
    "optim": "verl.workers.config.FSDPOptimizerConfig",
    "checkpoint": "verl.trainer.config.CheckpointConfig",
    "profiler": "verl.utils.profiler.ProfilerConfig",
}

DEFAULTS: dict[str, Any] = {
    "data": {
        "train_batch_size": 256,
        "micro_batch_size_per_gpu": 4,
        "max_token_len_per_gpu": 8192,
        "use_dynamic_bsz": True,
        "train_files": "~/data/gsm8k/train.parquet",
        "val_files": None,
        "train_max_samples": -1,
        "val_max_samples": -1,
        "messages_key": "messages",
        "tools_key": "tools",
        "enable_thinking_key": "enable_thinking",
        "enable_thinking_default": "none",
        "pad_mode": "no_padding",
        "max_length": 1024,
        "truncation": "error",
        "balance_dp_token": False,
        "custom_cls": {"path": None, "name": None},
        "use_shm": False,
        "apply_chat_template_kwargs": {},
        "num_workers": 8,
        "ignore_input_ids_mismatch": False,
    },
    "model": {
        "path": "~/models/deepseek-llm-7b-chat",
        "hf_config_path": None,
        "tokenizer_path": None,
        "use_shm": False,
        "trust_remote_code": False,
        "custom_chat_template": None,
        "external_lib": None,
        "override_config": {},
        "enable_gradient_checkpointing": True,
        "enable_activation_offload": False,
        "use_remove_padding": True,
        "lora_rank": 0,
        "lora_alpha": 16,
        "target_modules": "all-linear",
        "exclude_modules": None,
        "lora_adapter_path": None,
        "use_liger": False,
        "use_fused_kernels": False,
    },
    "engine": {
        "wrap_policy": {"min_num_params": 0},
        "param_offload": False,
        "optimizer_offload": False,
        "offload_policy": False,
        "reshard_after_forward": True,
        "fsdp_size": -1,
        "forward_prefetch": False,
        "model_dtype": "fp32",
        "use_orig_params": False,
        "seed": 42,
        "full_determinism": False,
        "ulysses_sequence_parallel_size": 1,
        "entropy_from_logits_with_chunking": False,
        "entropy_from_logits_chunk_size": 2048,
        "use_torch_compile": True,
        "entropy_checkpointing": False,
        "pad_to_length": False,
        "pad_to_length_bucket": 1024,
        "forward_only": False,
        "strategy": "fsdp",
        "dtype": "bfloat16",
    },
    "optim": {
        "optimizer": "AdamW",
        "optimizer_impl": "torch.optim",
        "lr": 1e-3,
        "lr_warmup_steps_ratio": 0.0,
        "total_training_steps": -1,
        "weight_decay": 0.01,
        "lr_warmup_steps": -1,
        "betas": [0.9, 0.999],
        "clip_grad": 1.0,
        "min_lr_ratio": 0.0,
        "num_cycles": 0.5,
        "lr_scheduler_type": "constant",
        "zero_indexed_step": True,
        "warmup_style": None,
        "override_optimizer_config": None,
    },
    "checkpoint": {"save_contents": ["model", "optimizer", "extra"], "load_contents": "${checkpoint.save_contents}"},
    "trainer": {
        "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
        "default_hdfs_dir": None,
        "project_name": "gsm8k-sft",
        "experiment_name": "test",
        "total_epochs": 4,
        "total_training_steps": None,
        "logger": ["console", "wandb"],
        "seed": 1,
        "save_freq": -1,
        "test_freq": -1,
        "max_ckpt_to_keep": None,
        "balance_batch": True,
        "resume_mode": "auto",
        "resume_from_path": None,
        "device": "cuda",
        "nnodes": 1,
        "n_gpus_per_node": 1,
        "profile_interval": [-1, -1],
        # the product's key (not verl's): resolved config and metrics.jsonl
        "output_dir": "outputs/${trainer.project_name}/${trainer.experiment_name}",
    },
}

# dict-valued keys taken whole (their inner keys are the user's)
FREE = {"data.apply_chat_template_kwargs", "model.override_config", "engine.wrap_policy"}


def _thinking(value: Any, _: dict[str, Any]) -> bool | None:
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
        return None
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, bool):
        return value
    raise ValueError(f"data.enable_thinking_default: must be true | false | none, got {value!r}")


def _packed(_: Any, tree: dict[str, Any]) -> bool:
    """Packed (padding-free) forwards with model.use_remove_padding or data.pad_mode=no_padding (same loss)."""
    mode = tree["data"]["pad_mode"]
    if mode not in ("no_padding", "right"):
        raise ValueError(f"data.pad_mode: must be no_padding | right, got {mode!r}")
    return bool(tree["model"]["use_remove_padding"]) or mode == "no_padding"


def _list(value: Any, _: dict[str, Any]) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def _warmup(value: Any, _: dict[str, Any]) -> int | None:
    return None if value is None or value < 0 else int(value)


def _schedule(value: Any, tree: dict[str, Any]) -> str:
    alias = tree["optim"].get("warmup_style")
    if alias is not None and alias != value and value != "constant":
        raise ValueError(
            f"optim.lr_scheduler_type={value!r} and its deprecated alias optim.warmup_style={alias!r} "
            "disagree; set only lr_scheduler_type"
        )
    return alias if alias is not None and value == "constant" else value


def _fsdp_size(value: Any, tree: dict[str, Any]) -> None:
    """engine.fsdp_size: -1 or the world size (torchrun's WORLD_SIZE, else nnodes x n_gpus_per_node) shard over all
    ranks."""
    import os

    t = tree["trainer"]
    world = int(os.environ.get("WORLD_SIZE") or t["nnodes"] * t["n_gpus_per_node"])
    if value not in (-1, world):
        raise ValueError(
            f"`engine.fsdp_size={value}` is not supported yet: hybrid sharding (HSDP) is not implemented; "
            f"use -1 or the world size {world}"
        )


def _compute_dtype(value: Any, tree: dict[str, Any]) -> str | None:
    """engine.dtype is the mixed-precision compute dtype on CUDA; on CPU the compute runs in model_dtype."""
    if value not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"engine.dtype: must be bfloat16 | float32 | float16, got {value!r}")
    if tree["trainer"]["device"] != "cuda":
        return None
    if value == "float16":
        raise ValueError("`engine.dtype=float16` is not supported yet: use bfloat16 (no loss scaling is wired)")
    return value


# verl key -> SFT schema key, or (SFT key, convert(value, whole resolved tree))
MAPPED: dict[str, Any] = {
    **{
        f"data.{k}": f"data.{k}"
        for k in (
            "train_batch_size",
            "micro_batch_size_per_gpu",
            "max_token_len_per_gpu",
            "use_dynamic_bsz",
            "train_max_samples",
            "val_max_samples",
            "max_length",
            "truncation",
            "balance_dp_token",
            "custom_cls.path",
            "custom_cls.name",
        )
    },
    "data.train_files": ("data.train_files", _list),
    "data.val_files": ("data.val_files", _list),
    "data.messages_key": "data.multiturn.messages_key",
    "data.tools_key": "data.multiturn.tools_key",
    "data.enable_thinking_key": "data.multiturn.enable_thinking_key",
    "data.enable_thinking_default": ("data.multiturn.enable_thinking_default", _thinking),
    "data.apply_chat_template_kwargs": "data.multiturn.apply_chat_template_kwargs",
    "data.pad_mode": ("use_remove_padding", _packed),
    "model.use_remove_padding": ("use_remove_padding", _packed),
    "model.path": "model.partial_pretrain",
    "model.custom_chat_template": "data.chat_template",
    **{
        f"model.{k}": f"model.{k}"
        for k in (
            "tokenizer_path",
            "trust_remote_code",
            "external_lib",
            "override_config",
            "enable_gradient_checkpointing",
            "lora_rank",
            "lora_alpha",
            "target_modules",
            "exclude_modules",
            "use_liger",
        )
    },
    "engine.strategy": "model.strategy",
    "engine.wrap_policy": "model.fsdp_config.wrap_policy",
    "engine.param_offload": "model.fsdp_config.offload_params",
    "engine.optimizer_offload": "model.fsdp_config.optimizer_offload",
    "engine.offload_policy": "model.fsdp_config.cpu_offload",
    "engine.model_dtype": "model.fsdp_config.model_dtype",
    "engine.dtype": ("model.fsdp_config.mixed_precision", _compute_dtype),
    "engine.ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
    "engine.fsdp_size": ("_checked.fsdp_size", _fsdp_size),
    **{
        f"optim.{k}": f"optim.{k}"
        for k in ("lr", "weight_decay", "betas", "clip_grad", "min_lr_ratio", "num_cycles", "zero_indexed_step")
    },
    "optim.lr_warmup_steps_ratio": "optim.warmup_steps_ratio",
    "optim.lr_warmup_steps": ("optim.lr_warmup_steps", _warmup),
    "optim.lr_scheduler_type": ("optim.lr_scheduler", _schedule),
    "checkpoint.save_contents": "checkpoint.save_contents",
    "checkpoint.load_contents": "checkpoint.load_contents",
    **{
        f"trainer.{k}": f"trainer.{k}"
        for k in (
            "default_local_dir",
            "default_hdfs_dir",
            "project_name",
            "experiment_name",
            "total_epochs",
            "total_training_steps",
            "logger",
            "seed",
            "save_freq",
            "test_freq",
            "max_ckpt_to_keep",
            "resume_mode",
            "resume_from_path",
            "device",
            "nnodes",
            "n_gpus_per_node",
            "output_dir",
        )
    },
}

# accepted at verl's default value only: (default, what to do)
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    "model.hf_config_path": (None, "the model config is read from model.path; leave it null"),
    "model.enable_activation_offload": (
        False,
        "activation offload is not wired; use model.enable_gradient_checkpointing",
    ),
    "model.lora_adapter_path": (None, "starting from a saved LoRA adapter is not wired; merge it into model.path"),
    "model.use_fused_kernels": (False, "verl's fused log-prob kernels are not wired; leave it false"),
    "model.tiled_mlp.enabled": (False, "tiled MLP is not wired; leave it false"),
    "model.mtp.enable": (False, "multi-token prediction is not wired; leave it false"),
    "model.mtp.enable_train": (False, "multi-token prediction is not wired; leave it false"),
    "model.mtp.enable_rollout": (False, "multi-token prediction is not wired; leave it false"),
    "model.lora.rank": (0, "this is the Megatron engine's LoRA block; use model.lora_rank with engine=fsdp"),
    "engine.full_determinism": (False, "deterministic kernels are not wired; seeded CPU runs are already reproducible"),
    "engine.pad_to_length": (False, "padding every micro-batch to a fixed length is not wired; leave it false"),
    "engine.forward_only": (False, "the SFT trainer trains; leave it false"),
    "engine.qat.enable": (False, "quantization-aware training is not wired; leave it false"),
    "optim.optimizer": ("AdamW", "only AdamW is wired; leave optimizer=AdamW"),
    "optim.optimizer_impl": ("torch.optim", "only torch.optim is wired; leave optimizer_impl=torch.optim"),
    "optim.override_optimizer_config": (
        None,
        "optimizer options beyond lr/betas/weight_decay are not wired; remove it",
    ),
    "trainer.profile_interval": ([-1, -1], "profiling is not wired; leave [-1, -1]"),
    "profiler.enable": (False, "profiling is not wired; leave it false"),
}

NOOP: dict[str, str] = {
    "data.use_shm": "copies the data files to /dev/shm for speed; the same rows are read",
    "data.num_workers": "rows are tokenized once when the dataset is built, in the trainer process (same batches)",
    "data.ignore_input_ids_mismatch": "every turn boundary is rendered from the whole conversation, so the ids "
    "are the whole rendering's; there is no per-turn mismatch to ignore",
    "model.use_shm": "copies the model to /dev/shm for speed; the same weights are loaded",
    "model.fused_kernel_options.*": "read only with model.use_fused_kernels (refused)",
    "model.tiled_mlp.*": "read only with model.tiled_mlp.enabled (refused)",
    "model.mtp.*": "read only with model.mtp.enable (refused)",
    "model.lora.*": "the Megatron engine's LoRA block, read only with engine=megatron",
    "engine.reshard_after_forward": _SAME,
    "engine.forward_prefetch": _SAME,
    "engine.use_orig_params": "an FSDP1 flag; FSDP2 always keeps the original parameters",
    "engine.seed": "the run is seeded from trainer.seed (data order and any init randomness)",
    "engine.entropy_from_logits_with_chunking": "SFT computes no entropy",
    "engine.entropy_from_logits_chunk_size": "SFT computes no entropy",
    "engine.entropy_checkpointing": "SFT computes no entropy",
    "engine.use_torch_compile": "verl compiles its log-prob helpers for speed only (" + _SAME + ")",
    "engine.pad_to_length_bucket": "read only with engine.pad_to_length (refused)",
    "engine.qat.*": "read only with engine.qat.enable (refused)",
    "engine.turbo_config.*": "read only by verl's turbo engine",
    "optim.total_training_steps": "filled in by the trainer with the run's total steps, as verl does",
    "optim.warmup_style": "deprecated alias of optim.lr_scheduler_type (read with it)",
    "trainer.balance_batch": "balances sequence lengths over ranks for speed; the loss divides by the global token "
    "count, so the values are the same",
    "profiler.*": "read only with profiler.enable (refused)",
}

# keys that only one of the two layouts has (a config using one is in that layout)
NEW_ONLY = (
    "engine",
    "checkpoint",
    "profiler",
    "model.path",
    "model.use_remove_padding",
    "model.custom_chat_template",
    "model.hf_config_path",
    "model._target_",
    "model.lora_adapter_path",
    "model.use_fused_kernels",
    "data.messages_key",
    "data.tools_key",
    "data.enable_thinking_key",
    "data.enable_thinking_default",
    "data.pad_mode",
    "data.use_dynamic_bsz",
    "data.max_token_len_per_gpu",
    "data.train_max_samples",
    "data.val_max_samples",
    "data.ignore_input_ids_mismatch",
    "data.apply_chat_template_kwargs",
    "data.num_workers",
    "data.use_shm",
    "optim.lr_warmup_steps_ratio",
    "optim.lr_scheduler_type",
    "optim._target_",
    "optim.num_cycles",
    "trainer.profile_interval",
    "trainer.balance_batch",
)
OLD_ONLY = (
    "model.partial_pretrain",
    "model.fsdp_config",
    "model.strategy",
    "data.prompt_key",
    "data.response_key",
    "data.prompt_dict_keys",
    "data.response_dict_keys",
    "data.multiturn",
    "data.chosen_key",
    "data.rejected_key",
    "data.micro_batch_size",
    "data.chat_template",
    "optim.warmup_steps_ratio",
    "optim.lr_scheduler",
    "optim.eps",
    "use_remove_padding",
    "ulysses_sequence_parallel_size",
    "dpo",
    "hybrid",
    "trainer.algorithm",
    "trainer.task_weights",
    "trainer.resume_path",
)
