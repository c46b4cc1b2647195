"""verl's Megatron / TorchTitan / VeOmni engine sections, run on the product's FSDP2 engine.

A role (``actor_rollout_ref.actor`` / ``.ref`` / ``critic``) with ``strategy`` ``megatron``,
``torchtitan`` or ``veomni`` (verl's ``model_engine=...`` group, the ``_generated_ppo_*_trainer.yaml``
files) is rewritten onto ``strategy=fsdp2`` when what it asks for is data parallel only:

- TorchTitan and VeOmni are FSDP2-based in verl; at tensor / pipeline / context / expert parallel
  sizes 1 (their defaults) a role is FSDP2 over the data-parallel world, which is this engine.
- Megatron at tensor / pipeline / context / expert / virtual-pipeline parallel sizes 1 is plain
  data parallel (its distributed optimizer shards optimizer state over dp, as FSDP2 does).

Mapped (:data:`ENGINE_MAP`, :data:`OPTIM_MAP`): lr, weight_decay, betas, eps, clip_grad, warm-up
steps / ratio, total steps, param / optimizer offload, ``dtype`` (the compute dtype, as
``fsdp_config.mixed_precision``: Megatron keeps fp32 main parameters too), seed, entropy chunking,
the LR schedule (Megatron ``lr_decay_style``, TorchTitan ``decay_type`` with ``min_lr_factor``,
VeOmni ``lr_scheduler_type`` with ``lr_min``) and the optimizer name (Megatron ``adam`` with
decoupled weight decay and VeOmni ``adamw`` are AdamW). The torchtitan engine's
``tensor_parallel_size`` is the product's tensor parallelism
(``fsdp_config.tensor_parallel_size``, checked in :mod:`verl.config.tp_checks`).

Every other key of those sections is a no-op only at verl's default value (:data:`NOOP_DEFAULTS`:
kernels, compile, checkpoint formats, recompute, Muon settings while the optimizer is AdamW, ...);
any other value, a parallel size > 1 (:data:`PARALLEL_KEYS`) or a key not listed is a one-line
"not supported yet" naming the engine and the key. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from verl.config.errors import not_supported

__all__ = ["ENGINES", "engine_override", "map_other_engines"]

ENGINES: dict[str, str] = {"megatron": "Megatron-LM", "torchtitan": "TorchTitan", "veomni": "VeOmni"}
"""verl's strategy name -> engine, for the engines mapped onto FSDP2."""

PARALLEL_KEYS: dict[str, tuple[str, ...]] = {
    "megatron": (
        "tensor_model_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
    ),
    "torchtitan": ("expert_parallel_size", "pipeline_parallel_size", "context_parallel_size"),
    "veomni": ("ulysses_parallel_size", "expert_parallel_size"),
}
"""Parallel sizes that must be 1 (or ``null``, verl's "not set") for a role to run data parallel."""

ENGINE_MAP: dict[str, str] = {
    "param_offload": "param_offload",
    "optimizer_offload": "optimizer_offload",
    "seed": "seed",
    "full_determinism": "full_determinism",
    "forward_prefetch": "forward_prefetch",
    "entropy_from_logits_with_chunking": "entropy_from_logits_with_chunking",
    "entropy_from_logits_chunk_size": "entropy_from_logits_chunk_size",
    "fsdp_size": "fsdp_size",
    "tensor_parallel_size": "tensor_parallel_size",
    "wrap_policy": "wrap_policy",
    "use_orig_params": "use_orig_params",
}
"""Engine-section key -> the role's ``fsdp_config`` key of the same meaning."""

_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32"}

OPTIM_MAP: dict[str, str] = {
    "name": "optimizer",
    "lr_decay_style": "lr_scheduler_type",
    "decay_type": "lr_scheduler_type",
}
"""Engine optimizer key -> the FSDP optimizer key (values translated by :func:`_map_optim`)."""

_MUON = {
    "muon_momentum": 0.95,
    "muon_nesterov": False,
    "muon_split_qkv": True,
    "muon_scale_mode": "spectral",
    "muon_coefficient_type": "quintic",
    "muon_num_ns_steps": 5,
    "muon_tp_mode": "blockwise",
    "muon_fp32_matmul_prec": "medium",
    "muon_extra_scale_factor": 1.0,
    "muon_scalar_optimizer": "adam",
    "muon_match_adamw_update_rms": False,
}

NOOP_DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron": {
        "grad_offload": False,
        "sequence_parallel": True,
        "use_distributed_optimizer": True,
        "use_dist_checkpointing": False,
        "dist_checkpointing_path": None,
        "dynamic_context_parallel": False,
        "max_seqlen_per_dp_cp_rank": None,
        "dist_checkpointing_prefix": "",
        "dist_ckpt_optim_fully_reshardable": False,
        "distrib_optim_fully_reshardable_mem_efficient": False,
        "use_mbridge": True,
        "vanilla_mbridge": False,
        "use_remove_padding": True,
        "pad_bshd_to_minibatch_max": True,
        "pad_to_length": False,
        "pad_to_length_bucket": 512,
        "use_megatron_fsdp": False,
        "override_ddp_config": {},
        "override_mcore_model_config": {},
        "mbridge_config": {},
        "override_transformer_config": {
            "recompute_granularity": None,
            "recompute_modules": ["core_attn"],
            "recompute_method": None,
            "recompute_num_layers": None,
            "attention_backend": "flash",
        },
        "router_replay": {"mode": "disabled", "record_file": None, "replay_file": None},
        "qat": {
            "enable": False,
            "mode": "w4a16",
            "group_size": 16,
            "ignore_patterns": ["lm_head", "*mlp.gate"],
            "activation_observer": None,
            "quantization_config_path": None,
        },
    },
    "torchtitan": {
        "reshard_after_forward": "default",
        "mixed_precision": False,
        "use_torch_compile": True,
        "entropy_checkpointing": False,
        "data_parallel_size": 1,
        "data_parallel_replicate_size": 1,
        "data_parallel_shard_size": 1,
        "attn_type": "flex",
        "spmd_backend": "spmd_types",
        "activation_checkpoint": "selective",
        "max_seq_len": None,
    },
    "veomni": {
        "mixed_precision": True,
        "init_device": "meta",
        "enable_full_shard": True,
        "ckpt_manager": "dcp",
        "load_checkpoint_path": None,
        "use_torch_compile": False,
        "entropy_checkpointing": False,
        "enable_fsdp_offload": False,
        "enable_reentrant": False,
        "attn_implementation": "flash_attention_2",
        "moe_implementation": "fused",
        "force_use_huggingface": False,
        "activation_gpu_limit": 0.0,
        "basic_modules": [],
        "pad_to_length": False,
        "pad_to_length_bucket": 1024,
        "router_replay": {"mode": "disabled"},
        **{
            f"{k}_implementation": "eager"
            for k in (
                "cross_entropy_loss",
                "rms_norm",
                "swiglu_mlp",
                "rotary_pos_emb",
                "rms_norm_gated",
                "causal_conv1d",
                "chunk_gated_delta_rule",
                "load_balancing_loss",
                "dsa_indexer",
                "dsa_attention",
                "mhc",
            )
        },
    },
}
"""Engine-section keys with no FSDP2 counterpart, accepted at verl's default value only."""

OPTIM_NOOPS: dict[str, dict[str, Any]] = {
    "megatron": {
        "lr_warmup_init": 0.0,
        "lr_decay_steps": None,
        "weight_decay_incr_style": "constant",
        "lr_wsd_decay_style": "exponential",
        "lr_wsd_decay_steps": None,
        "use_checkpoint_opt_param_scheduler": False,
        "use_precision_aware_optimizer": False,
        "main_grads_dtype": "fp32",
        "exp_avg_dtype": "fp32",
        "exp_avg_sq_dtype": "fp32",
        "use_layer_wise_distributed_optimizer": False,
        **_MUON,
    },
    "torchtitan": {},
    "veomni": {"lr_start": 0.0, "lr_decay_ratio": 1.0},
}
"""Engine optimizer keys accepted at verl's default value only (the Muon keys while the optimizer is Adam)."""

_OPTIMIZERS = {"adam": "AdamW", "adamw": "AdamW", "AdamW": "AdamW"}


_ROLES = ("actor_rollout_ref.actor.", "actor_rollout_ref.ref.", "critic.")
_OPTIM_KEYS = frozenset(
    {
        "name",
        "lr_decay_style",
        "decay_type",
        "min_lr",
        "lr_min",
        "min_lr_factor",
        *(k for table in OPTIM_NOOPS.values() for k in table),
    }
)


def engine_override(key: str, value: Any) -> dict[str, Any] | None:
    """An override of an engine section key (``critic.megatron.param_offload=true``,
    ``actor_rollout_ref.actor.optim.min_lr=...``) as tree values, mapped with the section by
    :func:`map_other_engines`; ``None`` for any other key."""
    from verl.config._tree import nested

    role = next((r for r in _ROLES if key.startswith(r)), None)
    if role is None:
        return None
    head, _, rest = key[len(role) :].partition(".")
    if rest and (head in ENGINES or (head == "optim" and rest in _OPTIM_KEYS)):
        return nested(key, value)
    return None


def _check_noop(engine: str, key: str, value: Any, default: Any) -> None:
    if isinstance(default, dict) and isinstance(value, dict):
        for sub, v in value.items():
            if sub == "_target_":
                continue
            if sub not in default:
                raise not_supported(f"{key}.{sub}", f"verl's {ENGINES[engine]} engine key has no FSDP2 counterpart")
            _check_noop(engine, f"{key}.{sub}", v, default[sub])
    elif value != default:
        raise not_supported(
            key, f"={value!r} on verl's {ENGINES[engine]} engine (runs on FSDP2 here; only {default!r})"
        )


def _map_engine(engine: str, path: str, section: dict[str, Any]) -> dict[str, Any]:
    """The role's ``fsdp_config`` values for an engine section (``path``: its dotted path)."""
    fsdp: dict[str, Any] = {}
    for key, value in section.items():
        name = f"{path}.{key}"
        if key in ("_target_", "strategy"):
            continue
        if key in PARALLEL_KEYS[engine]:
            if value not in (None, 1):
                raise not_supported(name, f"={value} ({ENGINES[engine]} parallelism); only data parallel runs here")
        elif key in ENGINE_MAP:
            fsdp[ENGINE_MAP[key]] = value
        elif key == "forward_only":  # verl's ref engine is forward-only, the actor's / critic's train
            if bool(value) != path.startswith("actor_rollout_ref.ref."):
                raise not_supported(name, f"={value!r} on this role (True on the reference only)")
        elif key == "dtype":
            if value not in _DTYPES:
                raise not_supported(name, f"={value!r}; use bfloat16 or float32")
            fsdp["mixed_precision"] = _DTYPES[value]  # the compute dtype; parameters and optimizer state stay fp32
        elif key in NOOP_DEFAULTS[engine]:
            _check_noop(engine, name, value, NOOP_DEFAULTS[engine][key])
        else:
            raise not_supported(name, f"verl's {ENGINES[engine]} engine key has no FSDP2 counterpart")
    return fsdp


def _map_optim(engine: str, path: str, optim: dict[str, Any]) -> None:
    """Rewrites an engine optimizer section onto the FSDP optimizer keys (in place)."""
    for key in list(optim):
        name, value = f"{path}.{key}", optim[key]
        if key in OPTIM_NOOPS[engine]:
            _check_noop(engine, name, optim.pop(key), OPTIM_NOOPS[engine][key])
        elif key in ("name", "optimizer"):
            if value not in _OPTIMIZERS:
                raise not_supported(name, f"={value!r} on verl's {ENGINES[engine]} engine; use adam / AdamW")
            optim.pop(key)
            optim["optimizer"] = _OPTIMIZERS[value]
        elif key == "override_optimizer_config" and not value:
            optim.pop(key)  # {} / null: no extra optimizer options
        elif key in ("lr_decay_style", "decay_type"):
            optim.pop(key)
            optim["lr_scheduler_type"] = value
    lr = float(optim.get("lr", 1e-6))
    for floor in ("min_lr", "lr_min"):  # absolute floors -> verl's ratio
        if floor in optim:
            value = float(optim.pop(floor))
            optim["min_lr_ratio"] = value / lr if lr > 0 else 0.0
    if "min_lr_factor" in optim:
        optim["min_lr_ratio"] = optim.pop("min_lr_factor")


def _resolved(tree: dict[str, Any], path: str, node: Any) -> Any:
    """``node`` (at ``path`` in ``tree``) with verl's ``${oc.select:...}`` interpolations resolved."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(OmegaConf.create(tree), path)
        return OmegaConf.to_container(value, resolve=True) if value is not None else node
    except Exception:  # noqa: BLE001 - an interpolation OmegaConf cannot resolve here: read the raw values
        return node


def _map_role(path: str, role: dict[str, Any], section: Any) -> None:
    engine = role["strategy"]
    role.pop(engine, None)
    fsdp = _map_engine(engine, f"{path}.{engine}", section) if isinstance(section, dict) else {}
    if path.endswith(".ref"):
        role.pop("optim", None)  # verl's forward-only reference engine builds no optimizer
    if isinstance(role.get("optim"), dict):
        _map_optim(engine, f"{path}.optim", role["optim"])
    checkpoint = role.get("checkpoint")
    if isinstance(checkpoint, dict) and "mbridge_config" in checkpoint:
        _check_noop(engine, f"{path}.checkpoint.mbridge_config", checkpoint.pop("mbridge_config"), {})
    if path == "critic":
        model = role.setdefault("model", {})
        model["fsdp_config"] = {**(model.get("fsdp_config") or {}), **fsdp}
    else:
        role["fsdp_config"] = {**(role.get("fsdp_config") or {}), **fsdp}
    role["strategy"] = "fsdp2"


def _ref_tensor_parallel(tree: dict[str, Any]) -> None:
    """verl's torchtitan reference selects the actor's ``tensor_parallel_size``; the product's
    forward-only reference is FSDP2 over the whole world (the same log-probs), so a value equal to
    the actor's is dropped there and any other value is refused."""
    arr = tree.get("actor_rollout_ref") or {}
    ref_fsdp = (arr.get("ref") or {}).get("fsdp_config") or {}
    actor_tp = ((arr.get("actor") or {}).get("fsdp_config") or {}).get("tensor_parallel_size", 1)
    if "tensor_parallel_size" in ref_fsdp:
        if ref_fsdp["tensor_parallel_size"] not in (1, actor_tp):
            raise not_supported("actor_rollout_ref.ref.torchtitan.tensor_parallel_size", "other than the actor's")
        del ref_fsdp["tensor_parallel_size"]


def map_other_engines(tree: dict[str, Any]) -> None:
    """Rewrites every role on verl's Megatron / TorchTitan / VeOmni engine onto FSDP2 (in place).

    Raises:
        ConfigError: "not supported yet" naming the engine key: a parallel size > 1, a no-op key
            away from verl's default, an optimizer other than Adam(W), a key with no counterpart.
    """
    arr = tree.get("actor_rollout_ref") or {}
    roles = [
        (path, role)
        for path, role in (
            ("actor_rollout_ref.actor", arr.get("actor")),
            ("actor_rollout_ref.ref", arr.get("ref")),
            ("critic", tree.get("critic")),
        )
        if isinstance(role, dict) and role.get("strategy") in ENGINES
    ]
    # resolved before any role is rewritten: verl's ref / critic sections select the actor's values
    sections = [_resolved(tree, f"{path}.{role['strategy']}", role.get(role["strategy"])) for path, role in roles]
    for (path, role), section in zip(roles, sections):
        _map_role(path, role, section)
    if any(role.get("strategy") == "fsdp2" and path.endswith(".ref") for path, role in roles):
        _ref_tensor_parallel(tree)
    critic = tree.get("critic")
    if roles and isinstance(critic, dict) and "nccl_timeout" in critic:  # verl's Megatron critic's own copy
        if critic["nccl_timeout"] != arr.get("nccl_timeout", 600):
            raise not_supported(
                "critic.nccl_timeout", "differing from actor_rollout_ref.nccl_timeout (one process group)"
            )
        del critic["nccl_timeout"]
