"""Translation of the short YAML layout of the product's documents into the canonical schema.

The source documents (``shared/seeds``) configure verl with a short layout: ``trainer.algorithm``,
``trainer.rollout_batch_size``, ``model.actor.model_name_or_path``, ``ppo.use_dynamic_bsz``,
top-level ``fsdp_config``..., and ``create_trainer({"rollout": {...}, "algorithm": "ppo",
"model": {"path": ...}})``. A document is in that layout when it has any key below; only those
keys are translated, every other key must already be canonical (or it is an unknown-key error),
and canonical keys in the same document win over translated ones.

=====================================  ==========================================================
seed key                               canonical meaning
=====================================  ==========================================================
``trainer.algorithm`` / ``algorithm``  ``algorithm.adv_estimator``: ppo -> gae (critic on),
(a string)                             grpo -> grpo, reinforce -> reinforce_plus_plus,
                                       hybrid -> gae on the hybrid engine (the documents' SFT+PPO+
                                       DPO mix is not a training mode here: a note is logged), any
                                       canonical estimator name -> itself
``trainer.task_weights``               error: multi-objective SFT/PPO/DPO mixing is not supported
``trainer.rollout_batch_size``         ``data.train_batch_size`` and
                                       ``actor_rollout_ref.actor.ppo_mini_batch_size`` (the layout
                                       has no mini-batch: one optimizer step per rollout batch)
``trainer.num_rollout_workers``        ``trainer.n_gpus_per_node`` (one worker process per device)
``trainer.use_vllm: true``             ``actor_rollout_ref.rollout.name: vllm``, ``trainer.device:
                                       cuda`` when vllm is installed ("if installed", as the seed
                                       document says); otherwise hf, with a logged warning
``trainer.use_flash_attn: true``       ``override_config.attn_implementation: flash_attention_2`` when flash-attn is installed, else the default (warning)
                                       of the actor and critic models; false -> no change
``model.actor.model_name_or_path``,    ``actor_rollout_ref.model.path``
``model.path``
``model.actor.use_fsdp``               nothing: FSDP2 is the only training engine (a plain module
                                       in one process); false logs a note
``model.actor.fsdp_config``            ``actor_rollout_ref.actor.fsdp_config`` (see fsdp_config)
``model.critic.model_name_or_path``    ``critic.model.path``
``model.reward_model.                  ``reward_model.model.path`` and ``reward_model.enable: true``
model_name_or_path``
``model.reward_model.device_map``      ignored with a note: worker groups place models (one process
                                       per device), not Hugging Face's device_map
``model.enable_gradient_checkpointing``  the actor and critic models' fields of the same name
``model.use_remove_padding``,
top-level ``use_remove_padding``
``model.lora_rank|lora_alpha|          the actor model's fields of the same name (any other
target_modules``                       ``ModelConfig`` field under ``model``/``model.actor`` too)
``ppo.use_dynamic_bsz``                ``use_dynamic_bsz`` of actor and critic, and
                                       ``log_prob_use_dynamic_bsz`` of rollout and ref
``ppo.max_token_len_per_gpu``          every token budget: actor ``ppo_max_token_len_per_gpu``,
                                       rollout/ref ``log_prob_max_token_len_per_gpu``, critic
                                       ``ppo_/forward_max_token_len_per_gpu``
``ppo.min_micro_batch_size_per_gpu``   1: the built-in behaviour (a micro-batch never is empty),
                                       noted; > 1: error (not supported)
``ppo.<ActorConfig field>``            ``actor_rollout_ref.actor.<field>``
``fsdp_config`` (top level)            every model's FSDP settings (actor, ref, critic, reward)
``fsdp_config.sharding_strategy``      FULL_SHARD -> ``reshard_after_forward: true``;
                                       SHARD_GRAD_OP -> false; NO_SHARD -> ``fsdp_size: 1``;
                                       HYBRID_SHARD -> ``fsdp_size: ${trainer.n_gpus_per_node}``;
                                       _HYBRID_SHARD_ZERO2 -> both of the last two
``fsdp_config.cpu_offload``            ``param_offload`` and ``optimizer_offload`` (FSDP1's
                                       CPUOffload moved parameters and the optimizer step to CPU);
                                       an explicit ``param_offload`` in the same block wins
``fsdp_config.mixed_precision``        ``mixed_precision`` (bf16 -> bfloat16, fp32 -> float32; a
                                       mapping's ``param_dtype``)
``fsdp_config.backward_prefetch``      ignored with a note (FSDP2 prefetches on its own)
``rollout.name``                       ``actor_rollout_ref.rollout.name``; vllm/sglang also set
                                       ``trainer.device: cuda``
``rollout.multi_turn: true``,          ``actor_rollout_ref.rollout.multi_turn.enable: true`` and
``rollout.tool_integration: true``     ``data.return_raw_chat: true``; tools are chosen by
                                       ``rollout.multi_turn.tool_config_path``
``rollout.max_tokens``                 ``data.max_response_length`` (the rollout's response_length
                                       follows it in ``finalize``)
``rollout.<RolloutConfig field>``      ``actor_rollout_ref.rollout.<field>`` (e.g. temperature)
=====================================  ==========================================================

``algorithm.use_kl_in_reward`` and ``algorithm.kl_ctrl.{type,target_kl,horizon}`` are already
canonical keys and need no translation.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
from collections.abc import Callable
from typing import Any

from verl.config import choices as C
from verl.config import schema as S
from verl.config._tree import merge_trees, set_path
from verl.config.errors import ConfigError, did_you_mean

__all__ = ["is_seed_key", "is_seed_layout", "translate_seed_layout"]

logger = logging.getLogger("verl.config")

ALGORITHMS: dict[str, str] = {"ppo": "gae", "grpo": "grpo", "reinforce": "reinforce_plus_plus", "hybrid": "gae"}
SEED_TRAINER_KEYS = frozenset({"algorithm", "rollout_batch_size", "num_rollout_workers", "use_vllm",
                               "use_flash_attn", "task_weights"})
SEED_TOP_KEYS = frozenset({"model", "ppo", "rollout", "use_remove_padding", "fsdp_config"})

_MODEL = "actor_rollout_ref.model"
_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
_ALL_FSDP = (f"{_ACTOR}.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.model.fsdp_config",
             "reward_model.model.fsdp_config")
_SHARDING: dict[str, dict[str, Any]] = {
    "FULL_SHARD": {"reshard_after_forward": True},
    "SHARD_GRAD_OP": {"reshard_after_forward": False},
    "NO_SHARD": {"fsdp_size": 1},
    "HYBRID_SHARD": {"fsdp_size": "${trainer.n_gpus_per_node}"},
    "_HYBRID_SHARD_ZERO2": {"fsdp_size": "${trainer.n_gpus_per_node}", "reshard_after_forward": False},
}


def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def is_seed_key(path: str) -> bool:
    """True for a dotted key of the seed layout (``trainer.rollout_batch_size``, ``ppo.x``, ...)."""
    parts = path.split(".")
    return (
        parts[0] in SEED_TOP_KEYS
        or (parts[0] == "algorithm" and len(parts) == 1)
        or (parts[0] == "trainer" and len(parts) == 2 and parts[1] in SEED_TRAINER_KEYS)
    )


def is_seed_layout(d: dict[str, Any]) -> bool:
    """True when a config dict uses any key of the seed layout (table in the module doc)."""
    trainer = d.get("trainer")
    return (
        bool(SEED_TOP_KEYS & d.keys())
        or isinstance(d.get("algorithm"), str)
        or (isinstance(trainer, dict) and bool(SEED_TRAINER_KEYS & trainer.keys()))
    )


def _unknown(path: str, valid: frozenset[str]) -> ConfigError:
    parent, _, leaf = path.rpartition(".")
    close = difflib.get_close_matches(leaf, sorted(valid), n=1)
    hint = f" (did you mean '{parent}.{close[0]}'?)" if close else ""
    return ConfigError(f"unknown key '{path}'{hint}")


def _algorithm(value: Any, key: str, out: dict[str, Any]) -> None:
    name = str(value).lower()
    if name in C.ADV_ESTIMATORS:
        set_path(out, "algorithm.adv_estimator", name)
        return
    if name not in ALGORITHMS:
        valid = sorted(ALGORITHMS) + sorted(C.ADV_ESTIMATORS)
        raise ConfigError(f"{key}: must be one of {', '.join(valid)}, got {value!r}{did_you_mean(name, valid)}")
    if name == "hybrid":
        logger.warning("%s=hybrid: SFT/PPO/DPO task mixing is not a training mode here; training PPO (gae) on the "
                       "hybrid engine (actor, rollout and reference in one process)", key)
        set_path(out, "actor_rollout_ref.hybrid_engine", True)
    set_path(out, "algorithm.adv_estimator", ALGORITHMS[name])


def _trainer(trainer: dict[str, Any], out: dict[str, Any]) -> None:
    if "task_weights" in trainer:
        raise ConfigError("trainer.task_weights: multi-objective SFT/PPO/DPO mixing is not supported; run "
                          "`verl sft`, `verl dpo` and `verl train` as separate stages")
    if "algorithm" in trainer:
        _algorithm(trainer.pop("algorithm"), "trainer.algorithm", out)
    if "rollout_batch_size" in trainer:
        size = trainer.pop("rollout_batch_size")
        set_path(out, "data.train_batch_size", size)
        set_path(out, f"{_ACTOR}.ppo_mini_batch_size", size)
    if "num_rollout_workers" in trainer:
        set_path(out, "trainer.n_gpus_per_node", trainer.pop("num_rollout_workers"))
    if trainer.pop("use_vllm", False):
        if _installed("vllm"):
            _rollout_name("vllm", out)
        else:
            logger.warning("trainer.use_vllm: vllm is not installed; using the built-in hf rollout engine "
                           "(pip install 'verl[vllm]' on a GPU machine to use vLLM)")
    if trainer.pop("use_flash_attn", False):
        if _installed("flash_attn"):
            for model in (_MODEL, "critic.model"):
                set_path(out, f"{model}.override_config.attn_implementation", "flash_attention_2")
        else:
            logger.warning("trainer.use_flash_attn: flash-attn is not installed; keeping the default attention")


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _rollout_name(name: Any, out: dict[str, Any]) -> None:
    set_path(out, f"{_ROLLOUT}.name", name)
    if name in C.GPU_ONLY_ROLLOUTS or (name == "vllm" and not _vllm_cpu_build()):
        set_path(out, "trainer.device", "cuda")


def _vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (``vllm-cpu``), which runs with trainer.device=cpu."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _fsdp(block: Any, key: str) -> dict[str, Any]:
    """Translates one FSDP1-style block into ``FSDPConfig`` values."""
    if not isinstance(block, dict):
        raise ConfigError(f"{key}: expected a mapping, got {block!r}")
    block, out = dict(block), {}
    if "sharding_strategy" in block:
        strategy = str(block.pop("sharding_strategy")).upper()
        if strategy not in _SHARDING:
            raise ConfigError(f"{key}.sharding_strategy: must be one of {', '.join(_SHARDING)}, got {strategy!r}")
        out.update(_SHARDING[strategy])
    if "cpu_offload" in block:
        offload = block.pop("cpu_offload")
        offload = offload.get("offload_params", False) if isinstance(offload, dict) else bool(offload)
        out.update(param_offload=offload, optimizer_offload=offload)
    if "mixed_precision" in block:
        mp = block.pop("mixed_precision")
        out["mixed_precision"] = mp.get("param_dtype") if isinstance(mp, dict) else mp
    if "backward_prefetch" in block:
        block.pop("backward_prefetch")
        logger.warning("%s.backward_prefetch ignored: FSDP2 prefetches the next layer on its own", key)
    valid = _fields(S.FSDPConfig)
    for name, value in block.items():
        if name not in valid:
            raise _unknown(f"{key}.{name}", valid | {"sharding_strategy", "cpu_offload", "backward_prefetch"})
        out[name] = value
    return out


def _model_role(role: str, block: Any, out: dict[str, Any]) -> None:
    key = f"model.{role}"
    if not isinstance(block, dict):
        raise ConfigError(f"{key}: expected a mapping, got {block!r}")
    target, cls = {"actor": (_MODEL, S.ModelConfig), "critic": ("critic.model", S.CriticModelConfig),
                   "reward_model": ("reward_model.model", S.RewardModelModelConfig)}[role]
    fsdp_target = f"{_ACTOR}.fsdp_config" if role == "actor" else f"{target}.fsdp_config"
    valid = _fields(cls) | {"model_name_or_path", "use_fsdp", "fsdp_config", "device_map"}
    for name, value in block.items():
        if name == "model_name_or_path":
            set_path(out, f"{target}.path", value)
            if role == "reward_model":
                set_path(out, "reward_model.enable", True)
        elif name == "use_fsdp":
            if not value:
                logger.warning("%s.use_fsdp=false ignored: the training engine is FSDP2 (a plain module when run "
                               "in one process)", key)
        elif name == "device_map":
            logger.warning("%s.device_map ignored: worker groups place each model (one process per device, "
                           "trainer.n_gpus_per_node), not Hugging Face's device_map", key)
        elif name == "fsdp_config":
            out.update(merge_trees(out, _nested_at(fsdp_target, _fsdp(value, f"{key}.fsdp_config"))))
        elif name in valid:
            set_path(out, f"{target}.{name}", value)
        else:
            raise _unknown(f"{key}.{name}", valid)


def _nested_at(path: str, values: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in values.items():
        set_path(tree, f"{path}.{name}", value)
    return tree


def _model(block: Any, out: dict[str, Any]) -> None:
    if not isinstance(block, dict):
        raise ConfigError(f"model: expected a mapping, got {block!r}")
    shared = {"enable_gradient_checkpointing", "use_remove_padding"}
    valid = _fields(S.ModelConfig) | {"actor", "critic", "reward_model", "model_name_or_path"}
    for name, value in block.items():
        if name in ("actor", "critic", "reward_model"):
            _model_role(name, value, out)
        elif name == "model_name_or_path":
            set_path(out, f"{_MODEL}.path", value)
        elif name in shared:
            set_path(out, f"{_MODEL}.{name}", value)
            set_path(out, f"critic.model.{name}", value)
        elif name in valid:
            set_path(out, f"{_MODEL}.{name}", value)
        else:
            raise _unknown(f"model.{name}", valid)


def _ppo(block: Any, out: dict[str, Any]) -> None:
    if not isinstance(block, dict):
        raise ConfigError(f"ppo: expected a mapping, got {block!r}")
    valid = _fields(S.ActorConfig) | {"max_token_len_per_gpu", "min_micro_batch_size_per_gpu"}
    for name, value in block.items():
        if name == "use_dynamic_bsz":
            for path in (f"{_ACTOR}.use_dynamic_bsz", "critic.use_dynamic_bsz",
                         f"{_ROLLOUT}.log_prob_use_dynamic_bsz", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz"):
                set_path(out, path, value)
        elif name == "max_token_len_per_gpu":
            for path in (f"{_ACTOR}.ppo_max_token_len_per_gpu", f"{_ROLLOUT}.log_prob_max_token_len_per_gpu",
                         "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", "critic.ppo_max_token_len_per_gpu",
                         "critic.forward_max_token_len_per_gpu"):
                set_path(out, path, value)
        elif name == "min_micro_batch_size_per_gpu":
            if not isinstance(value, int) or value > 1:
                raise ConfigError(f"ppo.min_micro_batch_size_per_gpu: only 1 is supported (a dynamic micro-batch "
                                  f"holds at least one sequence), got {value!r}")
            logger.info("ppo.min_micro_batch_size_per_gpu=1 is the built-in behaviour: nothing to set")
        elif name in valid:
            set_path(out, f"{_ACTOR}.{name}", value)
        else:
            raise _unknown(f"ppo.{name}", valid)


def _rollout(block: Any, out: dict[str, Any]) -> None:
    if not isinstance(block, dict):
        raise ConfigError(f"rollout: expected a mapping, got {block!r}")
    valid = _fields(S.RolloutConfig) | {"tool_integration", "max_tokens"}
    for name, value in block.items():
        if name == "name":
            _rollout_name(value, out)
        elif name in ("multi_turn", "tool_integration") and not isinstance(value, dict):
            if value:
                set_path(out, f"{_ROLLOUT}.multi_turn.enable", True)
                set_path(out, "data.return_raw_chat", True)
        elif name == "max_tokens":
            set_path(out, "data.max_response_length", value)
        elif name in valid:
            set_path(out, f"{_ROLLOUT}.{name}", value)
        else:
            raise _unknown(f"rollout.{name}", valid)


def _top_fsdp(block: Any, out: dict[str, Any]) -> None:
    values = _fsdp(block, "fsdp_config")
    for path in _ALL_FSDP:
        out.update(merge_trees(out, _nested_at(path, values)))


def _remove_padding(value: Any, out: dict[str, Any]) -> None:
    set_path(out, f"{_MODEL}.use_remove_padding", value)
    set_path(out, "critic.model.use_remove_padding", value)


_TOP_HANDLERS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "fsdp_config": _top_fsdp,  # first, so that model.actor.fsdp_config refines it
    "model": _model,
    "use_remove_padding": _remove_padding,
    "ppo": _ppo,
    "rollout": _rollout,
}


def translate_seed_layout(d: dict[str, Any]) -> dict[str, Any]:
    """Translates a config dict in the seed layout into canonical keys (table in the module doc).

    Args:
        d: A config dict (one YAML document, or ``create_trainer``'s dict); not modified.

    Returns:
        A new dict in the canonical layout. A dict with no seed key is returned as a copy.

    Raises:
        ConfigError: A seed key with an unsupported value, or an unknown key inside a seed section.
    """
    rest = copy.deepcopy(d)
    out: dict[str, Any] = {}
    if isinstance(rest.get("trainer"), dict):
        _trainer(rest["trainer"], out)
        if not rest["trainer"]:
            del rest["trainer"]
    if isinstance(rest.get("algorithm"), str):
        _algorithm(rest.pop("algorithm"), "algorithm", out)
    for key, handler in _TOP_HANDLERS.items():
        if key in rest:
            handler(rest.pop(key), out)
    return merge_trees(out, rest) if out else rest
