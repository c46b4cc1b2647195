"""Derived values: fills every "None = derived from X" field so the saved config is explicit.

``finalize`` runs after the per-section checks and before the cross-section ones. It is
idempotent (finalizing a finalized config changes nothing), which is what makes the YAML
printed by ``verl config show`` load back to an equal config. What it derives:

==============================================  =============================================
field                                           value when unset
==============================================  =============================================
``actor_rollout_ref.rollout.prompt_length``     ``data.max_prompt_length``
``actor_rollout_ref.rollout.response_length``   ``data.max_response_length``
``critic.enable``                               ``algorithm.adv_estimator`` needs a value
                                                model (``gae``)
``critic.ppo_mini_batch_size``                  ``actor_rollout_ref.actor.ppo_mini_batch_size``
``critic.forward_micro_batch_size_per_gpu``     ``critic.ppo_micro_batch_size_per_gpu``
``actor_rollout_ref.actor.loss_scale_factor``   ``data.max_response_length`` (the Dr.GRPO
                                                constant L of ``seq-mean-token-sum-norm``)
``X_per_gpu`` from a deprecated global ``X``    ``X // world_size``; ``X`` is then cleared
                                                (actor/critic ``ppo_micro_batch_size``,
                                                ref/rollout ``log_prob_micro_batch_size``,
                                                ``reward_model.micro_batch_size``)
``*.strategy`` / ``*.dtype`` aliases            canonical names (``fsdp`` -> ``fsdp2``,
                                                ``bf16`` -> ``bfloat16``, ``fp32`` -> ...)
``actor_rollout_ref.hybrid_engine``             false with ``trainer.v1.trainer_mode=
                                                separate_async`` (its rollout is standalone)
``data.tool_config_path``                       ``actor_rollout_ref.rollout.multi_turn.
                                                tool_config_path`` (verl's default interpolation)
==============================================  =============================================

The world size is ``trainer.nnodes x trainer.n_gpus_per_node``. Global micro-batch sizes count
trajectories, as in verl, so ``X_per_gpu = X / world_size``.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from verl.config import choices as C
from verl.config.compat.verl_keys_checks import translate_aliases
from verl.config.errors import ConfigError
from verl.config.schema import RootConfig

__all__ = ["finalize", "rollout_world_size", "world_size"]


def world_size(cfg: RootConfig) -> int:
    """Number of worker processes per role: ``trainer.nnodes x trainer.n_gpus_per_node``."""
    return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node


def rollout_world_size(cfg: RootConfig) -> int:
    """Workers of the rollout's own group (``hybrid_engine=false``): ``rollout.nnodes x
    rollout.n_gpus_per_node``, each 0 meaning the trainer's value."""
    r, t = cfg.actor_rollout_ref.rollout, cfg.trainer
    return (r.nnodes or t.nnodes) * (r.n_gpus_per_node or t.n_gpus_per_node)


def _per_gpu_from_global(section: Any, prefix: str, total: str, per_gpu: str, world: int) -> None:
    value = getattr(section, total)
    if value is None or getattr(section, per_gpu) is not None:
        return
    if value % world:
        raise ConfigError(
            f"{prefix}.{total}: {value} trajectories is not divisible by the world size {world} "
            f"(trainer.nnodes x trainer.n_gpus_per_node); set {prefix}.{per_gpu} instead"
        )
    setattr(section, per_gpu, value // world)
    setattr(section, total, None)


def _normalise_aliases(section: Any) -> None:
    """Rewrites alias spellings of ``strategy`` / ``dtype`` / ``mixed_precision`` in every section."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            _normalise_aliases(value)
        elif f.name == "strategy" and value in C.STRATEGY_ALIASES:
            setattr(section, f.name, C.STRATEGY_ALIASES[value])
        elif f.name in ("dtype", "mixed_precision") and value in C.DTYPE_ALIASES:
            setattr(section, f.name, C.DTYPE_ALIASES[value])


def finalize(cfg: RootConfig) -> RootConfig:
    """Returns a copy of ``cfg`` with every derived value filled in (table in the module doc).

    Args:
        cfg: A config whose individual values are valid (``check_sections`` passed).

    Returns:
        A new ``RootConfig``; ``cfg`` is not modified.

    Raises:
        ConfigError: A deprecated global micro-batch size not divisible by the world size.
    """
    cfg = copy.deepcopy(cfg)
    translate_aliases(cfg)  # verl's alternative spellings (see verl.config.compat.verl_keys_checks)
    data, arr, critic = cfg.data, cfg.actor_rollout_ref, cfg.critic
    rollout, actor = arr.rollout, arr.actor
    if rollout.prompt_length is None:
        rollout.prompt_length = data.max_prompt_length
    if rollout.response_length is None:
        rollout.response_length = data.max_response_length
    if critic.enable is None:
        critic.enable = cfg.algorithm.adv_estimator in C.CRITIC_ESTIMATORS
    if critic.ppo_mini_batch_size is None:
        critic.ppo_mini_batch_size = actor.ppo_mini_batch_size
    if actor.loss_scale_factor is None:
        actor.loss_scale_factor = float(data.max_response_length)
    if data.tool_config_path is None:  # verl: ${oc.select:actor_rollout_ref.rollout.multi_turn.tool_config_path, null}
        data.tool_config_path = rollout.multi_turn.tool_config_path
    if critic.model.path is None:
        critic.model.path = arr.model.path
    if critic.model.tokenizer_path is None:
        critic.model.tokenizer_path = arr.model.tokenizer_path

    world = world_size(cfg)
    for section, prefix, total, per_gpu in (
        (actor, "actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        (critic, "critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        (arr.ref, "actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
        (rollout, "actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
        (cfg.reward_model, "reward_model", "micro_batch_size", "micro_batch_size_per_gpu"),
    ):
        _per_gpu_from_global(section, prefix, total, per_gpu, world)
    if critic.forward_micro_batch_size_per_gpu is None:
        critic.forward_micro_batch_size_per_gpu = critic.ppo_micro_batch_size_per_gpu
    _normalise_aliases(cfg)
    if cfg.trainer.v1.trainer_mode == "separate_async":  # verl: a standalone rollout on its own pool
        arr.hybrid_engine = False
    return cfg
