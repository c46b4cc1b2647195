"""verl's vectorised group estimators and GDPO, registered in `ADV_ESTIMATORS`.

``grpo_vectorized``, ``rloo_vectorized`` and ``gdpo`` follow the formulas of verl's estimators
of those names (``verl.trainer.ppo.core_algos``), including verl's singleton rules, which differ
from this package's ``grpo`` / ``rloo`` (see `group_advantages`):

- ``grpo_vectorized`` (and each GDPO component): a group of one sample has baseline 0 and
  std 1, so A = s / (1 + ε) (s without std scaling), as this package's ``grpo``;
- ``rloo_vectorized``: a group with fewer than two scorable samples gets A = 0 (``rloo``
  keeps the raw score).

The other group rules are this package's: samples are grouped by ``index``, statistics are
float64 (`groups.group_stats`), a zero-spread group gets exactly 0, an unscorable sample
(score NaN) gets 0 and is left out of its group's statistics. Same signature as every estimator
(`verl.algorithms.advantages`).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.advantages import ADV_ESTIMATORS, broadcast_to_tokens, requires_inputs, sequence_scores
from verl.algorithms.groups import GroupStats, group_ids, group_stats
from verl.algorithms.masked import masked_whiten

__all__ = [
    "compute_gdpo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "grpo_scalars",
]


def grpo_scalars(scores: torch.Tensor, st: GroupStats, norm_by_std: bool, epsilon: float) -> torch.Tensor:
    """`(B,)` float64 GRPO advantages with verl's singleton rule (module docstring)."""
    x = scores.double()
    single = st.size == 1  # a group of one sample; one scorable sample among several gets 0
    adv = x - torch.where(single, torch.zeros_like(st.mean), st.mean)
    if norm_by_std:
        adv = adv / (torch.where(single, torch.ones_like(st.std), st.std) + epsilon)
    return torch.where(st.valid & (single | ~st.constant), adv, torch.zeros_like(adv))


@ADV_ESTIMATORS.register("grpo_vectorized")
@torch.no_grad()
def compute_grpo_vectorized_outcome_advantage(
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
    """GRPO (Shao et al. 2024, arXiv 2402.03300), verl's vectorised form: A_i = (s_i − μ_g) / (σ_g + ε).

    σ_g is the unbiased group std; without ``norm_adv_by_std_in_grpo`` A_i = s_i − μ_g
    (Dr.GRPO). A singleton group uses μ = 0, σ = 1 (verl's rule).

    Args:
        token_level_rewards: `(B, R)`; the score s_i is the masked sum of row i.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        norm_adv_by_std_in_grpo: divide by σ_g + ε.
        epsilon: ε.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    adv = broadcast_to_tokens(
        grpo_scalars(scores, st, norm_adv_by_std_in_grpo, epsilon), response_mask, token_level_rewards.dtype
    )
    return adv, adv


@ADV_ESTIMATORS.register("rloo_vectorized")
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(
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
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740), verl's vectorised form.

    A_i = (n s_i − Σ_g s) / (n − 1) = s_i − mean_{j≠i} s_j for a group of n >= 2 scorable
    samples; a singleton gets 0 (verl's rule; this package's ``rloo`` keeps its raw score).

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.
    """
    scores = sequence_scores(token_level_rewards, response_mask)
    st = group_stats(scores, group_ids(index, scores.shape[0]))
    x = scores.double()
    loo = (st.count * x - st.total) / (st.count - 1).clamp(min=1)
    informative = st.valid & (st.count >= 2) & ~st.no_spread
    adv = broadcast_to_tokens(
        torch.where(informative, loo, torch.zeros_like(loo)), response_mask, token_level_rewards.dtype
    )
    return adv, adv


@ADV_ESTIMATORS.register("gdpo")
@requires_inputs("reward_components")
@torch.no_grad()
def compute_gdpo_outcome_advantage(
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
    """GDPO (group reward-decoupled normalisation, arXiv 2601.05242), as verl's ``gdpo``.

    Each reward component k is normalised within its group on its own,
    A_k = GRPO(r_k) (as ``grpo_vectorized``), so that a dominant component cannot drown the
    others; then A = whiten_batch(Σ_k w_k A_k) over all valid tokens of the batch. Without
    components the single component is the sequence score (GRPO, then whitening).

    Args:
        token_level_rewards: `(B, R)`; its row sums are the fallback single component.
        response_mask: `(B, R)`.
        index: `(B,)` group ids (uid), required.
        norm_adv_by_std_in_grpo: divide each component by its group std + ε.
        epsilon: ε.
        **kwargs: ``reward_components`` `(K, B)` per-sample component scores (verl:
            ``algorithm.gdpo_reward_keys`` of the reward function's extra info), and
            ``gdpo_reward_weights`` (K floats, default all 1).

    Returns:
        (advantages, returns), equal `(B, R)` tensors, 0 on masked positions.

    Raises:
        ValueError: components not `(K, B)`, or a weight count other than K.
    """
    components = kwargs.get("reward_components")
    batch = token_level_rewards.shape[0]
    if components is None:
        components = sequence_scores(token_level_rewards, response_mask).unsqueeze(0)
    components = torch.as_tensor(components, device=token_level_rewards.device).double()
    if components.dim() != 2 or components.shape[1] != batch:
        raise ValueError(f"gdpo: reward_components must be (K, {batch}), got {tuple(components.shape)}")
    weights = kwargs.get("gdpo_reward_weights")
    weights = [1.0] * components.shape[0] if weights is None else [float(w) for w in weights]
    if len(weights) != components.shape[0]:
        raise ValueError(
            f"gdpo: algorithm.gdpo_reward_weights has {len(weights)} entries for "
            f"{components.shape[0]} reward components"
        )
    ids = group_ids(index, batch)
    total = torch.zeros(batch, dtype=torch.float64, device=components.device)
    for weight, comp in zip(weights, components):
        total = total + weight * grpo_scalars(comp, group_stats(comp, ids), norm_adv_by_std_in_grpo, epsilon)
    adv = masked_whiten(broadcast_to_tokens(total, response_mask, token_level_rewards.dtype), response_mask)
    return adv, adv
