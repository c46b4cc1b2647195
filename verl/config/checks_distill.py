"""Checks of the ``distillation`` section (`verl.config.schema_distill`), verl's rules.

Nothing is checked while ``distillation.enabled`` is false: verl's own defaults (``topk: 32``,
``n_gpus_per_node: 8``, ``nnodes: 0``, a teacher without ``model_path``) load as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.config.errors import ConfigError, did_you_mean, not_supported
from verl.config.schema_distill import DistillationConfig, resolve_teachers

__all__ = ["check_distillation_section", "check_distillation_run"]

logger = logging.getLogger(__name__)

ESTIMATOR_LOSS_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
TOPK_LOSS_MODES = ("forward_kl_topk",)
LOSS_MODES = ESTIMATOR_LOSS_MODES + TOPK_LOSS_MODES
"""The names of `verl.algorithms.distillation.DISTILLATION_LOSSES`, as strings: the config does not
import the packages it configures (a test checks that both lists agree)."""


def check_distillation_section(d: DistillationConfig, prefix: str) -> None:
    """The rules inside ``distillation`` (registered in `verl.config.checks.SECTION_CHECKS`).

    Raises:
        ConfigError: an unknown loss mode, k1 backpropagated directly, a policy loss other than
            vanilla, a non-positive size or clip ratio, or a teacher entry `resolve_teachers` refuses.
    """
    if not d.enabled:
        return
    loss, lp = d.distillation_loss, f"{prefix}.distillation_loss"
    if loss.loss_mode not in LOSS_MODES:
        raise ConfigError(
            f"{lp}.loss_mode: unknown distillation loss {loss.loss_mode!r}; valid: "
            f"{', '.join(LOSS_MODES)}{did_you_mean(loss.loss_mode, LOSS_MODES)}"
        )
    if loss.loss_mode in ("k1", "kl") and not loss.use_policy_gradient:
        raise ConfigError(
            f"{lp}.loss_mode={loss.loss_mode} needs use_policy_gradient=true: backpropagating k1 directly "
            "is incorrect (its gradient does not depend on the teacher's log-probs)"
        )
    if loss.policy_loss_mode != "vanilla":
        raise not_supported(
            f"{lp}.policy_loss_mode", "only vanilla is implemented for the distillation policy gradient, as verl"
        )
    if loss.loss_mode in TOPK_LOSS_MODES:
        if loss.topk is None or loss.topk < 1:
            raise ConfigError(f"{lp}.topk: must be >= 1 for {loss.loss_mode}, got {loss.topk!r}")
        if loss.use_policy_gradient:
            logger.warning(
                "%s: forward_kl_topk with use_policy_gradient=true uses only the sampled token's log-prob; "
                "the top-k signal is mostly unused (verl recommends use_policy_gradient=false)",
                lp,
            )
    for name in ("chunked_topk_chunk_size", "clip_ratio", "clip_ratio_low", "clip_ratio_high", "loss_max_clamp"):
        value = getattr(loss, name)
        if value is not None and value <= 0:
            raise ConfigError(f"{lp}.{name}: must be > 0, got {value!r}")
    if d.n_gpus_per_node < 0 or d.nnodes < 0:
        raise ConfigError(f"{prefix}.n_gpus_per_node / nnodes: must be >= 0, got {d.n_gpus_per_node}, {d.nnodes}")
    for name, t in resolve_teachers(d, prefix).items():
        if t.inference.dtype not in (None, "float32", "bfloat16", "fp32", "bf16"):
            raise ConfigError(
                f"{prefix}.teacher_models: teacher {name!r} inference.dtype must be float32 or bfloat16, "
                f"got {t.inference.dtype!r}"
            )
        if t.inference.temperature not in (None, 1.0):  # verl's default interpolates the rollout's temperature
            logger.warning(
                "%s.teacher_models: teacher %r inference.temperature=%s has no effect: teacher log-probs are "
                "scored at temperature 1, as verl",
                prefix,
                name,
                t.inference.temperature,
            )


def check_distillation_run(cfg: Any) -> None:
    """Rules that span ``distillation`` and the other sections (finalized root config).

    Raises:
        ConfigError: ``use_task_rewards=false`` (the PPO loss is dropped, as verl) with a KL loss or
            an entropy bonus that would then be silently ignored; a teacher whose ``max_model_len``
            cannot hold the student's prompt, response and one more token (verl's check).
    """
    d = cfg.distillation
    if not d.enabled:
        return
    actor = cfg.actor_rollout_ref.actor
    if not d.distillation_loss.use_task_rewards and (actor.use_kl_loss or actor.entropy_coeff):
        raise ConfigError(
            "distillation.distillation_loss.use_task_rewards=false trains on the distillation loss alone "
            "(the PPO loss terms are dropped, as verl): set actor_rollout_ref.actor.use_kl_loss=false and "
            "entropy_coeff=0, or use_task_rewards=true"
        )
    rollout = cfg.actor_rollout_ref.rollout
    for name, t in resolve_teachers(d).items():
        inf = t.inference
        prompt = inf.prompt_length if inf.prompt_length is not None else rollout.prompt_length
        response = inf.response_length if inf.response_length is not None else rollout.response_length
        if inf.max_model_len is not None and prompt + response + 1 > inf.max_model_len:
            raise ConfigError(
                f"distillation.teacher_models: teacher {name!r} inference.max_model_len={inf.max_model_len} "
                f"cannot hold the student's prompt ({prompt}) + response ({response}) + 1 tokens"
            )
