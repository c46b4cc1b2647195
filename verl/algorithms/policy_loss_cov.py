"""Covariance-based policy losses Clip-Cov and KL-Cov, registered in `POLICY_LOSSES`.

Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (arXiv 2505.22617): policy entropy collapses because of tokens whose log-probability
and advantage covary strongly. Per valid token the centred covariance term is

    cov_t = (A_t − mean(A)) · (log π_θ(y_t) − mean(log π_θ)),   means over valid tokens,

and the few tokens with large cov_t get special treatment. Parameters and defaults follow
verl (``clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``, ``kl_cov_ratio``, ``ppo_kl_coef``),
passed through ``**extra``. Same signature and per-token output as `policy_loss`.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.masked import masked_mean, zero_masked
from verl.algorithms.policy_loss import POLICY_LOSSES, frac, log_ratio, metrics, valid_only

__all__ = ["compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov", "token_covariance"]


def token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Detached `(B, R)` cov_t (see module docstring); −inf on masked positions."""
    adv = advantages.detach()
    lp = log_prob.detach()
    cov = (adv - masked_mean(adv, mask)) * (lp - masked_mean(lp, mask))
    return torch.where(mask != 0, cov, torch.full_like(cov, -torch.inf))


@POLICY_LOSSES.register("clip_cov")
def compute_policy_loss_clip_cov(
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
    """Clip-Cov: PPO-clip loss with the gradient of a few high-covariance tokens removed.

    Among valid tokens that PPO's clip has not already clipped and whose cov_t lies in
    (clip_cov_lb, clip_cov_ub), max(1, ⌊clip_cov_ratio · N_valid⌋) are drawn at random and their
    loss (hence gradient) is set to 0. ``pg_clipfrac`` is the fraction of tokens so removed.

    Args:
        **extra: ``clip_cov_ratio`` (default 2e-4), ``clip_cov_lb`` (1.0), ``clip_cov_ub`` (5.0),
            ``generator`` (optional `torch.Generator` for the random draw).

    Raises:
        ValueError: if ``clip_cov_ratio <= 0``.
    """
    ratio_frac = float(extra.get("clip_cov_ratio", 2e-4))
    lower = float(extra.get("clip_cov_lb", 1.0))
    upper = float(extra.get("clip_cov_ub", 5.0))
    generator: torch.Generator | None = extra.get("generator")
    if ratio_frac <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {ratio_frac}")
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    valid = response_mask != 0
    ratio = torch.exp(log_ratio(old_log_prob, log_prob))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clipped_by_ppo = (loss_clipped > loss_unclipped) & valid
    cov = token_covariance(advantages, log_prob, response_mask)
    candidates = valid & ~clipped_by_ppo & (cov > lower) & (cov < upper)
    n_drop = max(int(ratio_frac * int(valid.sum())), 1)
    flat = torch.nonzero(candidates.flatten()).squeeze(-1)
    perm = torch.randperm(flat.numel(), generator=generator).to(flat.device)
    keep = torch.ones(candidates.numel(), dtype=log_prob.dtype, device=log_prob.device)
    keep[flat[perm[:n_drop]]] = 0
    keep = keep.view_as(log_prob)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped) * keep
    return zero_masked(pg_losses, response_mask), metrics(
        old_log_prob, log_prob, response_mask, clipfrac=frac(keep == 0, response_mask)
    )


@POLICY_LOSSES.register("kl_cov")
def compute_policy_loss_kl_cov(
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
    """KL-Cov: unclipped policy gradient plus a KL penalty on the top-covariance tokens.

    L_t = −A r for most tokens; for the k = max(1, ⌊kl_cov_ratio · N_valid⌋) valid tokens with
    the largest cov_t, L_t = −A r + ppo_kl_coef · |log π_θ − log π_old|. No ratio clipping (the
    clip arguments are ignored). Extra metric ``ppo_kl_abs`` = masked mean of |log ratio|.

    Args:
        **extra: ``kl_cov_ratio`` (default 2e-4), ``ppo_kl_coef`` (default 0.1).

    Raises:
        ValueError: if ``kl_cov_ratio <= 0``.
    """
    ratio_frac = float(extra.get("kl_cov_ratio", 2e-4))
    coef = float(extra.get("ppo_kl_coef", 0.1))
    if ratio_frac <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {ratio_frac}")
    old_log_prob, log_prob, advantages = valid_only(response_mask, old_log_prob, log_prob, advantages)
    lr = log_ratio(old_log_prob, log_prob)
    loss_pg = -advantages * torch.exp(lr)
    cov = token_covariance(advantages, log_prob, response_mask).flatten()
    n_valid = int((response_mask != 0).sum())
    penalised = torch.zeros_like(cov, dtype=torch.bool)
    if n_valid > 0:
        k = max(int(n_valid * ratio_frac), 1)
        penalised[torch.topk(cov, k).indices] = True
    penalised = penalised.view_as(lr)
    pg_losses = torch.where(penalised, loss_pg + coef * lr.abs(), loss_pg)
    out = metrics(old_log_prob, log_prob, response_mask)
    out["ppo_kl_abs"] = masked_mean(lr.abs().detach(), response_mask)
    return zero_masked(pg_losses, response_mask), out
