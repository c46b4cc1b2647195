"""Unknown-key hints for verl's spellings: renamed keys and sections of features the product lacks.

:func:`layout_hint` is consulted by :func:`verl.config.introspect.unknown_key_message` before
its generic did-you-mean: a key verl renamed names the current spelling, and a key inside a
section of an engine or feature this product does not have names that feature instead of a
close-looking unrelated key (``actor_rollout_ref.actor.megatron.param_offload`` is not "did you
mean actor_rollout_ref.actor.fsdp_config.param_offload").
"""

from __future__ import annotations

import fnmatch

__all__ = ["MISSING_FEATURES", "RENAMED", "layout_hint"]

RENAMED: dict[str, str] = {
    "sandbox_fusion.*": "reward.sandbox_fusion.*",
    "critic.fsdp_config.*": "critic.fsdp.*",
    "actor_rollout_ref.actor.fsdp.*": "actor_rollout_ref.actor.fsdp_config.*",
    "actor_rollout_ref.ref.fsdp.*": "actor_rollout_ref.ref.fsdp_config.*",
    "algorithm.rollout_is": "algorithm.rollout_correction.rollout_is",
    "algorithm.rollout_is_*": "algorithm.rollout_correction.rollout_is_*",
    "algorithm.rollout_rs": "algorithm.rollout_correction.rollout_rs",
    "algorithm.rollout_rs_*": "algorithm.rollout_correction.rollout_rs_*",
    "reward_model.custom_reward_function.*": "reward.custom_reward_function.*",
    "reward.reward_manager_name": "reward.reward_manager.name",
    "reward.model.path": "reward.reward_model.model_path",
    "reward.reward_model.model.path": "reward.reward_model.model_path",
    "trainer.val_generations_to_log_to_wandb": "trainer.log_val_generations",
}
"""verl's old spelling (fnmatch pattern) -> the current one (``*`` is carried over)."""

_ENGINE = "is not supported: this product trains with FSDP2 only; use strategy=fsdp (verl's model_engine=dp)"
MISSING_FEATURES: dict[str, str] = {
    "*.megatron.*": "verl's Megatron engine section (strategy=megatron) " + _ENGINE,
    "*.megatron": "verl's Megatron engine section (strategy=megatron) " + _ENGINE,
    "*.torchtitan.*": "verl's TorchTitan engine section (strategy=torchtitan) " + _ENGINE,
    "*.torchtitan": "verl's TorchTitan engine section (strategy=torchtitan) " + _ENGINE,
    "*.veomni.*": "verl's VeOmni engine section (strategy=veomni) " + _ENGINE,
    "*.veomni": "verl's VeOmni engine section (strategy=veomni) " + _ENGINE,
    "*.checkpoint.mbridge_config*": "Megatron-Bridge checkpoint conversion (strategy=megatron) " + _ENGINE,
    "*.optim.muon_*": "the Muon optimizer of verl's Megatron engine " + _ENGINE,
    "*.optim.lr_decay_*": "the Megatron optimizer scheduler " + _ENGINE,
    "*.optim.lr_wsd_*": "the Megatron optimizer scheduler " + _ENGINE,
    "*.optim.lr_warmup_init": "the Megatron optimizer scheduler " + _ENGINE,
    "*.optim.min_lr": "the Megatron optimizer scheduler (use optim.min_lr_ratio) " + _ENGINE,
    "*.optim.lr_min": "the VeOmni optimizer scheduler (use optim.min_lr_ratio) " + _ENGINE,
    "*.optim.lr_start": "the VeOmni optimizer scheduler " + _ENGINE,
    "*.optim.lr_decay_ratio": "the VeOmni optimizer scheduler " + _ENGINE,
    "*.optim.name": "the TorchTitan optimizer section (use optim.optimizer) " + _ENGINE,
    "*.optim.decay_type": "the TorchTitan optimizer scheduler (use optim.lr_scheduler_type) " + _ENGINE,
    "*.optim.min_lr_factor": "the TorchTitan optimizer scheduler (use optim.min_lr_ratio) " + _ENGINE,
}
"""Keys of features the product lacks (fnmatch pattern) -> what to say."""


def _renamed(path: str) -> str | None:
    for old, new in RENAMED.items():
        if fnmatch.fnmatchcase(path, old):
            if old.endswith("*") and new.endswith("*"):
                return new[:-1] + path[len(old) - 1 :]
            return new
    return None


def layout_hint(path: str) -> str | None:
    """The message for an unknown key that verl renamed or that belongs to a missing feature, else None."""
    new = _renamed(path)
    if new is not None:
        return f"unknown key '{path}': verl renamed it to '{new}'"
    for pattern, what in MISSING_FEATURES.items():
        if fnmatch.fnmatchcase(path, pattern):
            return f"unknown key '{path}': {what}"
    return None
