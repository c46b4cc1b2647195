"""Group-based outcome advantage estimators (critic-free), registered in `ADV_ESTIMATORS`.

All share the signature documented in `verl.algorithms.advantages`. Samples are grouped by
``index`` (the prompt uid), never by position, and groups may be ragged. Statistics come from
`verl.algorithms.groups.group_stats` (float64, one vectorised implementation).

Group rules, identical in every estimator here:
- a group with zero spread (all scorable scores equal up to round-off, `groups.zero_spread`)
  gets advantage exactly 0;
- a singleton group (one scorable sample) gets 0 — its own mean is its baseline — except in
  GRPO (a group of one sample) and RLOO (one scorable sample), which take verl's rule for a
  group of one (verl runs them with its default ``rollout.n=1``): baseline 0, i.e. the raw
  score (GRPO: divided by 1 + ε, its std taken as 1);
  the config layer refuses ``rollout.n < 2`` for the other estimators here;
- an unscorable sample (score NaN) gets 0 and is left out of its group's statistics.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.advantages import ADV_ESTIMATORS, broadcast_to_tokens, sequence_scores
from verl.algorithms.groups import group_ids, group_stats
from verl.algorithms.masked import masked_whiten

__all__ = [
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_rloo_outcome_advantage",
]


def _outcome(adv_seq: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(B,)` advantages → (advantages, returns) `(B, R)`, equal, in the rewards' dtype."""
    adv = broadcast_to_tokens(adv_seq, mask, rewards.dtype)
    return adv, adv


@ADV_ESTIMATORS.register("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(
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
    """GRPO (Shao et al. 2024, arXiv 2402.03300): A_i = (s_i − mean_g) / (std_g + ε).

    std_g is the unbiased (Bessel) group std. With ``norm_adv_by_std_in_grpo=False`` this is
    Dr.GRPO (Liu et al. 2025, arXiv 2503.20783): A_i = s_i − mean_g. Zero-spread groups give
    exactly 0; the std is never floored inside the sqrt. A group of one
    sample (e.g. ``rollout.n=1``) has mean 0 and std 1 as in verl's
    ``compute_grpo_outcome_advantage``: A_i = s_i / (1 + ε) (Dr.GRPO: s_i).

    Args:
        token_level_rewards: `(B, R)`; the score s_i is the masked sum of row i.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        norm_adv_by_std_in_grpo: divide by std_g + ε.
        epsilon: ε.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    single = st.size == 1  # a group of one sample (verl counts samples); one scorable of several stays 0
    x = scores.double()
    adv = x - torch.where(single, torch.zeros_like(x), st.mean)
    if norm_adv_by_std_in_grpo:
        adv = adv / (torch.where(single, torch.ones_like(x), st.std) + epsilon)
    adv = torch.where(st.valid & (single | ~st.constant), adv, torch.zeros_like(adv))
    return _outcome(adv, token_level_rewards, response_mask)


@ADV_ESTIMATORS.register("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(
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
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740): A_i = s_i − (Σ_{j≠i} s_j) / (n − 1).

    Equivalently n/(n − 1)·(s_i − mean_g). Singleton rule: with n = 1 the
    leave-one-out baseline is undefined; the baseline is 0, so A_i = s_i (raw score), as in
    verl's ``compute_rloo_outcome_advantage``. There is
    a single vectorised implementation, so no other code path can apply another rule.

    With ``norm_adv_by_std_in_rloo`` the leave-one-out advantage is divided by the group's
    unbiased std, as GRPO divides its own: A_i = (s_i − mean_{j≠i} s_j) / (std_g + ε) — the
    leave-one-out baseline with std scaling of NeMo-RL's GRPO (``use_leave_one_out_baseline``
    with ``normalize_rewards``) and TRL's RLOO ``normalize_advantages`` option, here per group.
    A singleton keeps its raw score (std undefined); zero-spread groups stay exactly 0.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        epsilon: ε.
        **kwargs: ``norm_adv_by_std_in_rloo`` (bool, default False): divide by std_g + ε
            (``algorithm.norm_adv_by_std_in_rloo``, an `AdvantageConfig` field; a keyword of this
            estimator only, so the registry signature stays the shared one).

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    x = scores.double()
    loo_mean = (st.total - x) / (st.count - 1).clamp(min=1)
    loo = x - loo_mean
    if kwargs.get("norm_adv_by_std_in_rloo", False):
        loo = loo / (st.std + epsilon)
    adv = torch.where(st.count >= 2, loo, x)
    adv = torch.where(st.valid & ~((st.count >= 2) & st.no_spread), adv, torch.zeros_like(adv))
    return _outcome(adv, token_level_rewards, response_mask)


@ADV_ESTIMATORS.register("opo")
@torch.no_grad()
def compute_opo_outcome_advantage(
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
    """OPO (Hao et al. 2025, arXiv 2505.23585): A_i = s_i − Σ_j l_j s_j / Σ_j l_j.

    The optimal baseline for sequence-level rewards is the length-weighted group mean, l_j the
    number of valid tokens of response j.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`; also gives the lengths l.
        index: `(B,)` group ids (uid), required.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids = group_ids(index, scores.shape[0]).to(scores.device)
    st = group_stats(scores, ids)
    x = torch.where(st.valid, scores.double(), torch.zeros_like(st.mean))
    lengths = torch.where(st.valid, (response_mask != 0).sum(-1).double(), torch.zeros_like(x))
    n_groups = int(ids.max()) + 1
    num = x.new_zeros(n_groups).index_add(0, ids, lengths * x)[ids]
    den = x.new_zeros(n_groups).index_add(0, ids, lengths)[ids]
    baseline = torch.where(den > 0, num / den.clamp(min=1), st.mean)
    adv = torch.where(st.valid & ~st.constant, x - baseline, torch.zeros_like(x))
    return _outcome(adv, token_level_rewards, response_mask)


@ADV_ESTIMATORS.register("gpg")
@torch.no_grad()
def compute_gpg_outcome_advantage(
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
    """GPG (Chu et al. 2025, arXiv 2504.02546): A_i = α (s_i − mean_g) / F_norm.

    α = B / (B − M) corrects the gradient for the M "invalid" samples whose group has zero
    spread (they carry no signal but still dilute the batch mean); α = B when every sample is
    invalid. F_norm is a constant, kwarg ``f_norm`` (default 1.0).

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        **kwargs: ``f_norm`` (float, default 1.0).

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    f_norm = float(kwargs.get("f_norm", 1.0))
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    informative = st.valid & ~st.constant
    batch = scores.shape[0]
    alpha = batch / max(batch - int((~informative).sum()), 1)
    adv = alpha * (scores.double() - st.mean) / f_norm
    adv = torch.where(informative, adv, torch.zeros_like(adv))
    return _outcome(adv, token_level_rewards, response_mask)


@ADV_ESTIMATORS.register("grpo_passk")
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
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
    """Pass@k GRPO (Chen et al. 2025, arXiv 2503.19595), as verl's estimator of that name.

    Only the best sample of a group gets a non-zero advantage, (s_max − s_second) / (std_g + ε)
    (without the division when ``norm_adv_by_std_in_grpo`` is False). Ties for the best go to
    the first sample in batch order; a tie makes s_max − s_second = 0.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        norm_adv_by_std_in_grpo: divide by std_g + ε.
        epsilon: ε.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.

    Raises:
        ValueError: if a group has fewer than 2 samples.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    ids = group_ids(index, scores.shape[0]).to(scores.device)
    st = group_stats(scores, ids)
    if bool((st.size < 2).any()):
        raise ValueError("grpo_passk needs at least 2 samples per group (rollout.n >= 2)")
    x = torch.where(st.valid, scores.double(), torch.full_like(st.mean, -torch.inf))
    pos = torch.arange(x.shape[0], device=x.device)
    n_groups = int(ids.max()) + 1
    is_max = st.valid & (x == st.max)
    first = torch.full((n_groups,), x.shape[0], device=x.device, dtype=torch.long)
    first = first.scatter_reduce(0, ids, torch.where(is_max, pos, x.shape[0]), "amin")
    best = pos == first[ids]
    others = torch.where(best, torch.full_like(x, -torch.inf), x)
    second = torch.full((n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
    second = second.scatter_reduce(0, ids, others, "amax")[ids]
    adv = st.max - second
    if norm_adv_by_std_in_grpo:
        adv = adv / (st.std + epsilon)
    adv = torch.where(best & ~st.constant, adv, torch.zeros_like(adv))
    return _outcome(adv, token_level_rewards, response_mask)


@ADV_ESTIMATORS.register("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
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
    """REINFORCE++-baseline (Hu 2025, arXiv 2501.03262): A = whiten_batch(s_i − mean_g).

    The group mean is subtracted per sequence, broadcast over its tokens, then the result is
    whitened over all valid tokens of the batch (global, not per-group, normalisation).

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    centred = torch.where(st.valid & ~st.constant, scores.double() - st.mean, torch.zeros_like(st.mean))
    adv = masked_whiten(broadcast_to_tokens(centred, response_mask, token_level_rewards.dtype), response_mask)
    return adv, adv
