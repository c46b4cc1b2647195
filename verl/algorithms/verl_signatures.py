"""Adapters: functions written to verl's ``core_algos`` signatures, run by this package's registries.

verl's extension points have other signatures than ours:

- an **advantage estimator** is called by keyword with the subset of ``token_level_rewards``,
  ``response_mask``, ``index``, ``values``, ``gamma``, ``lam``, ``epsilon``,
  ``norm_adv_by_std_in_grpo``, ``reward_baselines`` and ``config`` (the algorithm section) it
  declares, and returns ``(advantages, returns)`` `(B, R)` — the same contract as ours, so the
  adapter only filters keyword arguments by the function's signature;
- a **policy loss** is ``fn(old_log_prob, log_prob, advantages, response_mask,
  loss_agg_mode, config, rollout_is_weights) -> (pg_loss, metrics)``: it returns the loss
  already *aggregated* over its micro-batch (verl's ``agg_loss`` with local counts), while our
  actor aggregates per-token losses with the mini-batch's global counts.

For the policy loss, :func:`local_weights` turns the user's scalar back into a per-token loss
``pg_loss * w`` whose `agg_loss` with *local* counts is exactly ``pg_loss`` for every mode:

- ``token-mean``, ``seq-mean-token-mean``: ``w = mask``;
- ``seq-mean-token-sum``: ``w = mask / n_i`` (n_i = valid tokens of row i);
- ``seq-mean-token-sum-norm``: ``w = mask * L / n_i``.

With global counts, `agg_loss(pg_loss * w)` is then ``pg_loss * (local count / global count)``:
each micro-batch contributes its share and the mini-batch loss is the count-weighted mean of
the micro-batch losses, the same as verl's gradient-accumulation scaling.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from verl.algorithms.masked import zero_masked

__all__ = ["adapt_adv_estimator", "adapt_policy_loss", "local_weights"]


def _accepted(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def adapt_adv_estimator(
    fn: Callable[..., Any], config_view: Callable[[Any], Any] = lambda c: c
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Wraps a verl-signature advantage estimator into this package's estimator signature.

    Args:
        fn: ``fn(token_level_rewards, response_mask, ..., config=None, **kw)`` returning
            ``(advantages, returns)``, both `(B, R)`.
        config_view: Turns the algorithm section (passed by the trainer as ``algorithm=``, else
            the expanded estimator settings) into what ``fn`` expects as ``config`` (verl
            passes its AlgoConfig, with attribute access and ``.get``).

    Returns:
        An estimator for `ADV_ESTIMATORS`: it passes ``fn`` only the arguments it declares
        (all of them when it takes ``**kwargs``), with the masked slots of the rewards and
        values set to 0 by selection (verl's estimators sum rows unmasked), and keeps masked
        positions of the results at 0.
    """
    names, var_kw = _accepted(fn)

    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, **kwargs: Any):
        algorithm = kwargs.pop("algorithm", None)  # the trainer's whole algorithm section, when given
        if isinstance(kwargs.get("values"), torch.Tensor) and kwargs["values"].shape == response_mask.shape:
            kwargs["values"] = zero_masked(kwargs["values"], response_mask)
        offered = {
            "token_level_rewards": zero_masked(token_level_rewards, response_mask),
            "response_mask": response_mask,
            **kwargs,
        }
        if algorithm is not None:
            offered["config"] = config_view(algorithm)
        elif offered.get("config") is not None:
            offered["config"] = config_view(offered["config"])
        else:  # the settings the registry call expanded (gamma, lam, norm_adv_by_std_in_grpo, epsilon)
            settings = {k: offered[k] for k in ("gamma", "lam", "norm_adv_by_std_in_grpo", "epsilon") if k in offered}
            offered["config"] = config_view(settings)
        args = offered if var_kw else {k: v for k, v in offered.items() if k in names}
        advantages, returns = fn(**args)
        zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
        valid = response_mask != 0
        return torch.where(valid, advantages, zero), torch.where(valid, returns.to(advantages.dtype), zero)

    estimator.verl_fn = fn  # type: ignore[attr-defined]
    estimator.__doc__ = fn.__doc__
    estimator.__name__ = getattr(fn, "__name__", "verl_adv_estimator")
    return estimator


def local_weights(response_mask: torch.Tensor, loss_agg_mode: str, loss_scale_factor: float | None) -> torch.Tensor:
    """Per-token weights `(B, R)` whose local `agg_loss` is exactly 1 (module docstring).

    Raises:
        ValueError: An unknown mode, or sum-norm without a positive ``loss_scale_factor``.
    """
    mask = (response_mask != 0).to(torch.float32)
    if loss_agg_mode in ("token-mean", "seq-mean-token-mean"):
        return mask
    n = mask.sum(-1, keepdim=True).clamp(min=1.0)
    if loss_agg_mode == "seq-mean-token-sum":
        return mask / n
    if loss_agg_mode == "seq-mean-token-sum-norm":
        if not loss_scale_factor or loss_scale_factor <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive loss_scale_factor")
        return mask * float(loss_scale_factor) / n
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}")


def _metrics(raw: Any) -> dict[str, torch.Tensor]:
    """verl's metric names (``actor/pg_clipfrac``) -> ours (``pg_clipfrac``), as detached 0-d tensors."""
    out = {}
    for key, value in dict(raw).items():
        value = value.detach() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
        out[key.removeprefix("actor/")] = value.float().mean() if value.dim() else value.float()
    return out


def adapt_policy_loss(fn: Callable[..., Any], config_view: Callable[[Any], Any] = lambda c: c) -> Callable[..., Any]:
    """Wraps a verl-signature policy loss into this package's per-token policy-loss signature.

    Args:
        fn: ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
            config=None, rollout_is_weights=None) -> (pg_loss 0-d, metrics dict)``; the older
            verl return ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)`` is accepted too.
        config_view: Turns the actor section passed by the actor into what ``fn`` expects as
            ``config`` (verl passes its ActorConfig, with attribute access and ``.get``).

    Returns:
        A loss for `POLICY_LOSSES` returning ``(pg_loss * w, metrics)``, ``w`` from
        :func:`local_weights`. The actor passes ``loss_agg_mode`` and ``config`` as extras.
        ``fn`` receives its `(B, R)` tensors with the masked slots set to 0 by selection (verl's
        losses multiply by the mask, and ``0 · NaN`` is NaN, in the gradient too).
    """
    names, var_kw = _accepted(fn)

    def policy_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
        **extra: Any,
    ):
        offered = {
            "loss_agg_mode": loss_agg_mode,
            "config": config_view(config) if config is not None else None,
            "rollout_is_weights": rollout_is_weights,
        }
        kwargs = {k: v for k, v in offered.items() if var_kw or k in names}
        if kwargs.get("rollout_is_weights") is not None:
            kwargs["rollout_is_weights"] = zero_masked(kwargs["rollout_is_weights"], response_mask)
        old_log_prob, log_prob, advantages = (
            zero_masked(t, response_mask) for t in (old_log_prob, log_prob, advantages)
        )
        out = fn(old_log_prob, log_prob, advantages, response_mask, **kwargs)
        if isinstance(out, tuple) and len(out) == 4:  # verl < 0.5: (loss, clipfrac, ppo_kl, clipfrac_lower)
            out = (out[0], {"pg_clipfrac": out[1], "ppo_kl": out[2], "pg_clipfrac_lower": out[3]})
        pg_loss, metrics = out
        scale = getattr(config, "loss_scale_factor", None) if config is not None else None
        weights = local_weights(response_mask, loss_agg_mode, scale).to(device=pg_loss.device, dtype=pg_loss.dtype)
        return pg_loss * weights, _metrics(metrics)

    policy_loss.verl_fn = fn  # type: ignore[attr-defined]
    policy_loss.__doc__ = fn.__doc__
    policy_loss.__name__ = getattr(fn, "__name__", "verl_policy_loss")
    return policy_loss
