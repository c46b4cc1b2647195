"""verl's ``verl.trainer.ppo.core_algos`` import path, over this package's registries.

User code written for verl imports unchanged::

    from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss, agg_loss

    @register_adv_est("my_est")
    def my_est(token_level_rewards, response_mask, index, epsilon=1e-6, config=None): ...

    @register_policy_loss("my_loss")
    def my_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                config=None, rollout_is_weights=None): ...   # returns (pg_loss, metrics)

Registered functions go into `verl.algorithms.ADV_ESTIMATORS` / `POLICY_LOSSES` through the
adapters of :mod:`verl.algorithms.verl_signatures` (the actor then aggregates with global
counts), and their names become valid values of ``algorithm.adv_estimator`` /
``actor_rollout_ref.actor.policy_loss.loss_mode``. Name the module that registers them in
``actor_rollout_ref.model.external_lib`` (a module name or a ``.py`` path): it is imported when
the config loads and in every worker, as in verl.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable

import torch

from verl.algorithms import ADV_ESTIMATORS, POLICY_LOSSES
from verl.algorithms import agg_loss as _agg_loss
from verl.algorithms.kl import AdaptiveKLController, FixedKLController, get_kl_controller, kl_penalty
from verl.algorithms.masked import masked_mean, masked_whiten
from verl.algorithms.verl_signatures import adapt_adv_estimator, adapt_policy_loss
from verl.trainer.ppo.core_algos_verl import (
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from verl.config import choices

__all__ = [
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "agg_loss",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "get_adv_estimator_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "register_adv_est",
    "register_policy_loss",
]


# verl's enum of built-in estimator names (any registered string works too), generated from the
# registry of built-in estimators so that no estimator name is spelled in the trainer.
AdvantageEstimator = Enum("AdvantageEstimator", {name.upper(): name for name in sorted(ADV_ESTIMATORS)}, type=str)


def _name(name_or_enum: str | Enum) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else str(name_or_enum)


def _config_view(cfg: Any) -> Any:
    """A dataclass section as verl passes it: attribute access and ``.get`` (an OmegaConf view)."""
    import dataclasses

    from omegaconf import OmegaConf

    if isinstance(cfg, dict):
        return OmegaConf.create(cfg)
    return OmegaConf.structured(cfg) if dataclasses.is_dataclass(cfg) else cfg


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a verl-signature advantage estimator under ``name_or_enum``.

    Registering the same function twice is allowed (a module imported again); another function
    under a taken name is an error, as in verl.

    Raises:
        ValueError: The name is taken by another function.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = _name(name_or_enum)
        if name in ADV_ESTIMATORS:
            if getattr(ADV_ESTIMATORS.get(name), "verl_fn", None) is fn:
                return fn
            raise ValueError(f"advantage estimator {name!r} is already registered ({ADV_ESTIMATORS.get(name)!r})")
        ADV_ESTIMATORS.add(name, adapt_adv_estimator(fn, _config_view))
        choices.EXTENSIONS["adv_estimator"].add(name)
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> Callable[..., Any]:
    """The estimator registered under ``name_or_enum`` (the user's own function for verl-registered ones).

    Built-in estimators take verl's keyword arguments (``token_level_rewards=``,
    ``response_mask=``, ``index=``, ``config=`` ...) too.

    Raises:
        ValueError: Unknown name (lists the registered ones).
    """
    fn = ADV_ESTIMATORS.get(_name(name_or_enum))
    return getattr(fn, "verl_fn", fn)


def register_policy_loss(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a verl-signature policy loss under ``name`` (see module docstring).

    Raises:
        ValueError: The name is taken by another function.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in POLICY_LOSSES:
            if getattr(POLICY_LOSSES.get(name), "verl_fn", None) is fn:
                return fn
            raise ValueError(f"policy loss {name!r} is already registered ({POLICY_LOSSES.get(name)!r})")
        POLICY_LOSSES.add(name, adapt_policy_loss(fn, _config_view))
        choices.EXTENSIONS["policy_loss"].add(name)
        return fn

    return decorator


def _as_verl_loss(native: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in per-token loss behind verl's signature: aggregated with local counts."""

    def loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        def get(k, d):
            return getattr(config, k, d) if getattr(config, k, None) is not None else d

        clip = get("clip_ratio", 0.2)
        # the variants' own settings where verl keeps them: actor.tau_pos / tau_neg, actor.policy_loss.*
        extra = {"tau_pos": get("tau_pos", 1.0), "tau_neg": get("tau_neg", 1.05)}
        policy_loss = getattr(config, "policy_loss", None)
        for key in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta"):
            if getattr(policy_loss, key, None) is not None:
                extra[key] = getattr(policy_loss, key)
        pg_losses, metrics = native(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=get("clip_ratio_low", clip),
            clip_ratio_high=get("clip_ratio_high", clip),
            clip_ratio_c=get("clip_ratio_c", 3.0),
            **extra,
        )
        if rollout_is_weights is not None:
            pg_losses = pg_losses * rollout_is_weights
        mode = getattr(native, "loss_agg_mode", loss_agg_mode)  # sapo / geo_mean: verl's fixed aggregation
        pg_loss = _agg_loss(pg_losses, response_mask, mode, loss_scale_factor=get("loss_scale_factor", None))
        return pg_loss, {f"actor/{k}": float(v) for k, v in metrics.items()}

    return loss


def __getattr__(attr: str) -> Callable[..., Any]:
    """verl's ``compute_policy_loss_<mode>`` names (``compute_policy_loss_dro``, ``..._gspo``, ...):
    `get_policy_loss_fn`."""
    prefix = "compute_policy_loss_"
    if attr.startswith(prefix) and attr[len(prefix) :] in POLICY_LOSSES:
        return get_policy_loss_fn(attr[len(prefix) :])
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def get_policy_loss_fn(name: str) -> Callable[..., Any]:
    """The policy loss ``name`` with verl's signature (returns the aggregated loss and metrics).

    Raises:
        ValueError: Unknown name (lists the registered ones).
    """
    fn = POLICY_LOSSES.get(name)
    return getattr(fn, "verl_fn", None) or _as_verl_loss(fn)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
    **kwargs: Any,
) -> torch.Tensor:
    """verl's ``agg_loss``: `(B, R)` -> 0-d, verl's formula (``verl/trainer/ppo/core_algos.py``).

    One rank's share of the global loss, times ``dp_size`` (FSDP averages gradients over ranks):
    ``token-mean`` divides by ``batch_num_tokens`` (the global token count; this batch's own
    with ``dp_size=1``), ``token-sum`` is the masked sum, ``seq-*`` modes divide by
    ``global_batch_size`` (sequences with a valid token), ``seq-mean-token-sum-norm`` also by
    ``loss_scale_factor`` (default: the tensor width, as verl). The product's own keywords
    (``global_token_count``, ``global_seq_count``) pass through to `verl.algorithms.agg_loss`.

    Raises:
        ValueError: ``dp_size > 1`` without the global count the mode needs; an unknown mode.
    """
    if kwargs:
        return _agg_loss(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor=loss_scale_factor, **kwargs)
    if loss_agg_mode == "token-sum":
        return (loss_mat * loss_mask.to(loss_mat.dtype)).sum() * dp_size
    needs = batch_num_tokens if loss_agg_mode == "token-mean" else global_batch_size
    if dp_size > 1 and needs is None:
        raise ValueError(
            f"loss_agg_mode={loss_agg_mode}: the global "
            f"{'batch_num_tokens' if loss_agg_mode == 'token-mean' else 'global_batch_size'} is required "
            "when dp_size > 1"
        )
    if loss_agg_mode == "seq-mean-token-sum-norm" and loss_scale_factor is None:
        loss_scale_factor = loss_mask.shape[-1]
    return (
        _agg_loss(
            loss_mat,
            loss_mask,
            loss_agg_mode,
            global_token_count=batch_num_tokens,
            global_seq_count=global_batch_size,
            loss_scale_factor=loss_scale_factor,
        )
        * dp_size
    )
