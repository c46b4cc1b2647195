"""verl's positional signatures of the built-in advantage estimators (re-exported by `verl.trainer.ppo.core_algos`).

User code written for verl calls them as verl's ``core_algos`` defines them, e.g.
``compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)``
or ``compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam)``; each is
the product's estimator of the same name (`verl.algorithms.ADV_ESTIMATORS`), so a custom estimator
that builds on one gets exactly what the trainer computes. All return ``(advantages, returns)``,
both `(B, R)`.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms import ADV_ESTIMATORS

__all__ = [
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
]


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, gamma: Any, lam: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) over `(B, R)` rewards and values; the product's ``gae``."""
    return ADV_ESTIMATORS.get("gae")(
        token_level_rewards, response_mask, values=values, gamma=float(gamma), lam=float(lam)
    )


def _group(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float,
    norm_adv_by_std_in_grpo: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return ADV_ESTIMATORS.get(name)(
        token_level_rewards,
        response_mask,
        index=index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )


def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): (score − group mean) / (group std + ε) per ``index`` group."""
    return _group("grpo", token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)


def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's vectorized GRPO (same values as `compute_grpo_outcome_advantage`)."""
    return _group("grpo_vectorized", token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)


def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024): score − mean of the other responses of the group."""
    return _group("rloo", token_level_rewards, response_mask, index, epsilon, True)


def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's vectorized RLOO (same values as `compute_rloo_outcome_advantage`)."""
    return _group("rloo_vectorized", token_level_rewards, response_mask, index, epsilon, True)
