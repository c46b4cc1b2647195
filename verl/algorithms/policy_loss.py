"""Policy-gradient losses: one registry, one signature, per-token outputs.

Every entry is called as::

    pg_losses, metrics = fn(
        old_log_prob,    # (B, R) log π_old(y_t) (behaviour / rollout-time policy)
        log_prob,        # (B, R) log π_θ(y_t), differentiable
        advantages,      # (B, R)
        response_mask,   # (B, R) bool/float
        *, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, **extra,
    )

``pg_losses`` is the `(B, R)` per-token loss, exactly 0 on masked positions and NOT reduced:
reduction is `agg_loss`'s job. ``metrics`` holds detached 0-d tensors ``pg_clipfrac``,
``pg_clipfrac_lower`` and ``ppo_kl`` (= masked mean of log π_old − log π_θ), all masked means.
Each loss first selects its `(B, R)` inputs with `valid_only` (masked slots set to 0 by
``torch.where``), so whatever padded slots hold (NaN, ±inf) reaches neither a loss, a metric nor
a gradient: ``0 · NaN`` is NaN, in the backward pass too.
The covariance-based losses (clip_cov, kl_cov) are in `policy_loss_cov`; sapo, geo_mean, dppo_tv,
dppo_kl and dro in `policy_loss_variants`; bypass_mode in `policy_loss_bypass`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

from verl.algorithms.masked import masked_mean, zero_masked
from verl.utils.registry import Registry

__all__ = [
    "POLICY_LOSSES",
    "PolicyLossFn",
    "aggregated_by",
    "compute_policy_loss_cispo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_vanilla",
    "loss_agg_mode_for",
]

# exp(±20) ≈ 4.9e8 / 2.1e-9: bounds the importance ratio so exp never overflows to inf.
LOG_RATIO_CLAMP = 20.0


class PolicyLossFn(Protocol):
    """The signature shared by every registered policy loss (see module docstring)."""

    def __call__(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float = 0.2,
        clip_ratio_high: float = 0.2,
        clip_ratio_c: float = 3.0,
        **extra: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
F = TypeVar("F", bound=Callable[..., Any])


def aggregated_by(mode: str) -> Callable[[F], F]:
    """Mark a loss whose policy-gradient term verl always aggregates with ``mode`` (e.g. SAPO).

    The actor then aggregates that term with ``mode`` whatever ``actor.loss_agg_mode`` says (as
    verl does); the entropy and KL terms keep the configured mode. See `loss_agg_mode_for`.
    """

    def mark(fn: F) -> F:
        fn.loss_agg_mode = mode  # type: ignore[attr-defined]
        return fn

    return mark


def loss_agg_mode_for(name: str, configured: str) -> str:
    """The aggregation of loss ``name``'s policy-gradient term: its own (`aggregated_by`) or ``configured``."""
    return getattr(POLICY_LOSSES.get(name), "loss_agg_mode", configured)


def frac(condition: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Detached masked fraction of tokens where ``condition`` holds."""
    return masked_mean(condition.float(), mask).detach()


def valid_only(response_mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each `(B, R)` tensor with its masked slots set to 0 by selection (gradient 0 there too)."""
    return tuple(zero_masked(t, response_mask) for t in tensors)


def log_ratio(old_log_prob: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    """log π_θ − log π_old, clamped to [−20, 20] before any exp."""
    return torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def metrics(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    mask: torch.Tensor,
    clipfrac: torch.Tensor | None = None,
    clipfrac_lower: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The standard metric dict; missing clip fractions are 0."""
    zero = torch.zeros((), device=log_prob.device)
    return {
        "pg_clipfrac": zero if clipfrac is None else clipfrac,
        "pg_clipfrac_lower": zero if clipfrac_lower is None else clipfrac_lower,
        "ppo_kl": masked_mean((old_log_prob - log_prob).detach(), mask),
    }


@POLICY_LOSSES.register("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017) with clip-higher and dual clip.

    r = exp(clamp(log π_θ − log π_old, −20, 20));
    L = max(−A r, −A clip(r, 1 − ε_low, 1 + ε_high))         (asymmetric ε: DAPO clip-higher,
                                                              Yu et al. 2025, arXiv 2503.14476)
    for A < 0 additionally L = min(L, −A c)                 (dual clip, Ye et al. 2020,
                                                              arXiv 1912.09729), c = clip_ratio_c.

    Metrics: ``pg_clipfrac`` = fraction of tokens where the clipped term is the larger one;
    ``pg_clipfrac_lower`` = fraction with A < 0 where the dual-clip bound −A c is active.

    Raises:
        ValueError: if ``clip_ratio_c <= 1``.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"dual-clip constant clip_ratio_c must be > 1, got {clip_ratio_c}")
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    ratio = torch.exp(log_ratio(old_log_prob, log_prob))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual_bound = -advantages * clip_ratio_c
    loss_dual = torch.minimum(loss_ppo, loss_dual_bound)
    negative = advantages < 0
    pg_losses = torch.where(negative, loss_dual, loss_ppo)
    return zero_masked(pg_losses, response_mask), metrics(
        old_log_prob,
        log_prob,
        response_mask,
        clipfrac=frac(loss_clipped > loss_unclipped, response_mask),
        clipfrac_lower=frac(negative & (loss_ppo > loss_dual_bound), response_mask),
    )


@POLICY_LOSSES.register("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): sequence-level importance ratio.

    s_i = exp(mean_{t valid} (log π_θ − log π_old)); per token
    s_{i,t} = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)], so the value is s_i while the gradient flows
    through each token's log-prob; L = max(−A s_{i,t}, −A clip(s_{i,t}, 1 − ε_low, 1 + ε_high)).
    The paper's GSPO uses tiny ε (e.g. 3e-4 / 4e-4) and ``seq-mean-token-mean`` aggregation.
    The log of s_{i,t} is clamped at 10 against overflow.
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    mask_f = (response_mask != 0).to(log_prob.dtype)
    token_log_ratio = zero_masked(log_prob - old_log_prob, response_mask)
    seq_log_ratio = token_log_ratio.sum(-1) / mask_f.sum(-1).clamp(min=1)
    # Padded log-probs are zeroed first: garbage there must not turn into NaN gradients.
    lp = zero_masked(log_prob, response_mask)
    log_s = lp - lp.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(log_s, max=10.0))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)
    return zero_masked(pg_losses, response_mask), metrics(
        old_log_prob, log_prob, response_mask, clipfrac=frac(loss_clipped > loss_unclipped, response_mask)
    )


@POLICY_LOSSES.register("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): plain policy gradient L = −A · log π_θ.

    No ratio and no clipping (the clip arguments are ignored); clip fractions are 0.
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    pg_losses = -advantages * log_prob
    return zero_masked(pg_losses, response_mask), metrics(old_log_prob, log_prob, response_mask)


@POLICY_LOSSES.register("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): L = −sg[clip(r, 1 − ε_low, 1 + ε_high)] · A · log π_θ.

    The importance weight is clipped and detached, so — unlike PPO — no token's gradient is
    ever dropped; only its weight is bounded. The paper effectively uses only the upper bound
    (a large ε_low). Metrics: ``pg_clipfrac`` = fraction with r > 1 + ε_high,
    ``pg_clipfrac_lower`` = fraction with r < 1 − ε_low.
    """
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    ratio = torch.exp(log_ratio(old_log_prob, log_prob))
    weight = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high).detach()
    pg_losses = -weight * advantages * log_prob
    return zero_masked(pg_losses, response_mask), metrics(
        old_log_prob,
        log_prob,
        response_mask,
        clipfrac=frac(ratio > 1 + clip_ratio_high, response_mask),
        clipfrac_lower=frac(ratio < 1 - clip_ratio_low, response_mask),
    )
