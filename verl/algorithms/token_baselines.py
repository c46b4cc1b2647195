"""Optimal token baseline estimators (OTB), registered in `ADV_ESTIMATORS`.

"The Optimal Token Baseline" (https://yingru.notion.site/The-Optimal-Token-Baseline-399211a558b782cfa936014c0d42dfb8),
as verl's ``optimal_token_baseline`` and ``tir_optimal_token_baseline``: instead of one baseline
per trajectory, every step t of a prompt group gets the baseline that minimises the variance of
the policy gradient,

    B_t = Σ_i G_{i,t} W_{i,t} / (Σ_i W_{i,t} + 1e-8),    A_{i,t} = G_{i,t} − B_t,

with G the undiscounted reward-to-go and W_{i,t} = Σ_{j<=t} w_{i,j} the cumulative path-variance
proxy of the score function, w_j = 1 − 2 π(y_j) + Σ_v π(v)², π = exp(``old_log_probs``) and
Σπ² = ``sum_pi_squared`` from the old-log-prob forward; with truncated IS weights ρ̄ (rollout
correction) w_j is scaled by ρ̄_j². Sums run over the group's trajectories valid at t.

- ``optimal_token_baseline`` aligns steps by position t in the response;
- ``tir_optimal_token_baseline`` (multi-turn, tool-integrated) aligns them by the index of the
  valid token, so tool-output tokens (masked) between turns do not shift the alignment, and
  leaves empty responses out of the groups.

A group of one trajectory has baseline 0 (A = G). ``handle_zero_tail`` (default True, verl's
default): when one trajectory is strictly the longest of its group, its baseline past the
second-longest length is 0 (no other trajectory informs it).

``epsilon`` of the common signature (the std guard of the group estimators) is not used: the
denominator guard is 1e-8, verl's. Masked positions are selected away (``torch.where``).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.advantages import ADV_ESTIMATORS, requires_inputs
from verl.algorithms.groups import group_ids
from verl.algorithms.masked import zero_masked

__all__ = [
    "compute_optimal_token_baseline_advantage",
    "compute_tir_optimal_token_baseline_advantage",
    "path_variance_weights",
]

OTB_EPS = 1e-8


def path_variance_weights(
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """`(B, R)` W_t = Σ_{j<=t, valid} (1 − 2 π_j + Σπ²_j) · ρ̄_j², float64, 0 on masked slots."""
    valid = response_mask != 0
    pi = torch.exp(zero_masked(old_log_probs.double(), response_mask))
    w = 1.0 - 2.0 * pi + zero_masked(sum_pi_squared.double(), response_mask)
    if rollout_is_weights is not None:
        w = w * zero_masked(rollout_is_weights.double(), response_mask) ** 2
    return zero_masked(torch.where(valid, w, torch.zeros_like(w)).cumsum(-1), response_mask)


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """`(B, R)` float64 G_t = Σ_{t'>=t} r_t' over valid tokens (masked rewards are 0)."""
    r = zero_masked(token_level_rewards.double(), response_mask)
    return r.flip(-1).cumsum(-1).flip(-1)


def _group_baseline(
    returns: torch.Tensor,
    cum_w: torch.Tensor,
    mask: torch.Tensor,
    ids: torch.Tensor,
    members: torch.Tensor,
    zero_tail: bool,
) -> torch.Tensor:
    """`(B, R)` B_t of the module docstring over the groups of ``ids`` restricted to ``members``.

    ``mask`` `(B, R)` marks the steps each trajectory has; its row sums are the lengths of the
    zero-tail rule, whose positions are the column indices.
    """
    m = (mask != 0) & members.unsqueeze(-1)
    n_groups = int(ids.max()) + 1
    zeros = returns.new_zeros(n_groups, returns.shape[1])
    num = zeros.index_add(0, ids, torch.where(m, returns * cum_w, torch.zeros_like(returns)))
    den = zeros.index_add(0, ids, torch.where(m, cum_w, torch.zeros_like(cum_w)))
    baseline = (num / (den + OTB_EPS))[ids]
    size = returns.new_zeros(n_groups).index_add(0, ids, members.double())[ids]
    keep = members & (size >= 2)
    if zero_tail:
        lengths = torch.where(members, m.sum(-1), torch.full_like(m.sum(-1), -1))
        longest = torch.full((n_groups,), -1, dtype=lengths.dtype, device=lengths.device)
        longest = longest.scatter_reduce(0, ids, lengths, "amax")[ids]
        at_max = returns.new_zeros(n_groups).index_add(0, ids, (lengths == longest).double())[ids]
        others = torch.where(lengths == longest, torch.full_like(lengths, -1), lengths)
        second = torch.full((n_groups,), -1, dtype=lengths.dtype, device=lengths.device)
        second = second.scatter_reduce(0, ids, others, "amax")[ids]
        unique_longest = keep & (lengths == longest) & (at_max == 1)
        positions = torch.arange(returns.shape[1], device=returns.device).unsqueeze(0)
        tail = unique_longest.unsqueeze(-1) & (positions >= second.unsqueeze(-1))
        baseline = torch.where(tail, torch.zeros_like(baseline), baseline)
    return torch.where(keep.unsqueeze(-1), baseline, torch.zeros_like(baseline))


def _inputs(kwargs: dict[str, Any], name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    old, spp = kwargs.get("old_log_probs"), kwargs.get("sum_pi_squared")
    if old is None or spp is None:
        raise ValueError(
            f"{name} needs old_log_probs and sum_pi_squared (B, R) from the actor's old-log-prob "
            "forward (verl: actor.calculate_sum_pi_squared=true)"
        )
    return old, spp, kwargs.get("rollout_is_weights")


@ADV_ESTIMATORS.register("optimal_token_baseline")
@requires_inputs("old_log_probs", "sum_pi_squared", "rollout_is_weights")
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    index: Any = None,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    reward_baselines: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline, steps aligned by position (module docstring).

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        **kwargs: ``old_log_probs`` `(B, R)` and ``sum_pi_squared`` `(B, R)` (required),
            ``rollout_is_weights`` `(B, R)` (optional), ``handle_zero_tail`` (bool, default True).

    Returns:
        (advantages `(B, R)`, returns G `(B, R)`), both 0 on masked positions.

    Raises:
        ValueError: ``old_log_probs`` or ``sum_pi_squared`` missing.
    """
    old, spp, is_w = _inputs(kwargs, "optimal_token_baseline")
    ids = group_ids(index, token_level_rewards.shape[0]).to(token_level_rewards.device)
    returns = _reward_to_go(token_level_rewards, response_mask)
    cum_w = path_variance_weights(old, spp, response_mask, is_w)
    members = torch.ones_like(ids, dtype=torch.bool)
    baseline = _group_baseline(returns, cum_w, response_mask, ids, members, bool(kwargs.get("handle_zero_tail", True)))
    dtype = token_level_rewards.dtype
    return zero_masked(returns - baseline, response_mask).to(dtype), zero_masked(returns, response_mask).to(dtype)


def _compact(x: torch.Tensor, valid: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Move each row's valid entries to the left, in order; 0 after them."""
    width = x.shape[1]
    out = x.new_zeros(x.shape[0], width + 1)
    out.scatter_(1, torch.where(valid, slot, width), torch.where(valid, x, torch.zeros_like(x)))
    return out[:, :width]


@ADV_ESTIMATORS.register("tir_optimal_token_baseline")
@requires_inputs("old_log_probs", "sum_pi_squared", "rollout_is_weights")
@torch.no_grad()
def compute_tir_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    index: Any = None,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    reward_baselines: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline for multi-turn responses, steps aligned by valid-token index.

    Args and Returns as `compute_optimal_token_baseline_advantage`; a row without valid tokens
    belongs to no group.
    """
    old, spp, is_w = _inputs(kwargs, "tir_optimal_token_baseline")
    valid = response_mask != 0
    ids = group_ids(index, token_level_rewards.shape[0]).to(token_level_rewards.device)
    returns = _reward_to_go(token_level_rewards, response_mask)
    cum_w = path_variance_weights(old, spp, response_mask, is_w)
    slot = valid.long().cumsum(-1) - 1
    lengths = valid.sum(-1)
    compact_mask = torch.arange(valid.shape[1], device=valid.device).unsqueeze(0) < lengths.unsqueeze(-1)
    c_returns, c_w = _compact(returns, valid, slot), _compact(cum_w, valid, slot)
    baseline = _group_baseline(
        c_returns, c_w, compact_mask, ids, lengths > 0, bool(kwargs.get("handle_zero_tail", True))
    )
    c_adv = c_returns - baseline
    adv = torch.gather(c_adv, 1, slot.clamp(min=0))
    dtype = token_level_rewards.dtype
    return zero_masked(adv, response_mask).to(dtype), zero_masked(returns, response_mask).to(dtype)
