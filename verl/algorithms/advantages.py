"""Advantage estimators: one registry, one signature.

Every estimator is called as::

    advantages, returns = fn(
        token_level_rewards,      # (B, R) float, reward per response token (outcome rewards sit on
                                  #        the last valid token)
        response_mask,            # (B, R) bool/float, 1 where a response token counts
        *,
        index=None,               # (B,) group id (uid) of each sample: np.ndarray / list / tensor
        values=None,              # (B, R) critic values (gae)
        gamma=1.0,                # discount
        lam=1.0,                  # GAE lambda
        norm_adv_by_std_in_grpo=True,  # divide by the group std (False = Dr.GRPO)
        epsilon=1e-6,             # added to the std
        reward_baselines=None,    # (B,) baseline scores (remax: the greedy response's score)
        **kwargs,                 # estimator-specific extras (e.g. gpg's f_norm), ignored by others
    )

A trainer calls them through `compute_advantage` with the common inputs, the settings as one
`AdvantageConfig` (as verl passes ``config``) and a mapping of per-sample tensors from which each
estimator receives the extra inputs it declares with `requires_inputs` (ReMax:
``reward_baselines``); `estimator_inputs` tells the trainer which optional stages to run, so the
loop never branches on an estimator's name.

and returns two `(B, R)` tensors in the dtype of ``token_level_rewards``, both exactly 0 on
masked positions. Outcome estimators return ``returns = advantages`` (verl's convention).
The sequence score of an outcome estimator is the masked sum of its token rewards.

Token-level estimators (gae, reinforce_plus_plus, remax) live here; group-based ones
(grpo, rloo, opo, gpg, grpo_passk, reinforce_plus_plus_baseline) in `group_advantages`.
Everything runs under `torch.no_grad()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

from verl.algorithms.masked import masked_sum, masked_whiten, zero_masked
from verl.utils.registry import Registry

__all__ = [
    "ADV_ESTIMATORS",
    "AdvantageConfig",
    "estimator_inputs",
    "requires_inputs",
    "AdvantageEstimatorFn",
    "compute_advantage",
    "compute_gae_advantage_return",
    "compute_remax_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
]


class AdvantageEstimatorFn(Protocol):
    """The signature shared by every registered advantage estimator (see module docstring)."""

    def __call__(
        self,
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
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


ADV_ESTIMATORS: Registry[AdvantageEstimatorFn] = Registry("advantage estimator")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class AdvantageConfig:
    """Settings of the advantage estimators (the ``algorithm`` section's share).

    Attributes:
        gamma: discount (gae, reinforce_plus_plus).
        lam: GAE λ.
        norm_adv_by_std_in_grpo: GRPO-family: divide by the group std (False = Dr.GRPO).
        epsilon: added to standard deviations.
        norm_adv_by_std_in_rloo: rloo: divide the leave-one-out advantage by the group std.
        gdpo_reward_weights: gdpo: weight of each reward component (None = all 1).
    """

    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    epsilon: float = 1e-6
    norm_adv_by_std_in_rloo: bool = False
    gdpo_reward_weights: tuple[float, ...] | None = None


def requires_inputs(*keys: str) -> Callable[[F], F]:
    """Declare the per-sample inputs beyond rewards / mask / index / values an estimator needs."""

    def mark(fn: F) -> F:
        fn.extra_inputs = tuple(keys)  # type: ignore[attr-defined]
        return fn

    return mark


def estimator_inputs(name: str) -> tuple[str, ...]:
    """The extra per-sample inputs of estimator ``name`` (e.g. ``("reward_baselines",)`` for remax).

    Raises:
        RegistryError: unknown ``name``.
    """
    return tuple(getattr(ADV_ESTIMATORS.get(name), "extra_inputs", ()))


def compute_advantage(
    name: str,
    *,
    config: AdvantageConfig | None = None,
    inputs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatch to the estimator registered as ``name``.

    Args:
        name: registered estimator name (``algorithm.adv_estimator``).
        config: the estimator settings; its fields are passed as keyword arguments.
        inputs: per-sample tensors (e.g. the batch); the estimator receives those it declares
            with `requires_inputs`, `(B,)` or `(B, R)` each.
        **kwargs: the common estimator arguments (see module docstring), by keyword.

    Returns:
        (advantages, returns), both `(B, R)`.

    Raises:
        RegistryError: unknown ``name`` (lists valid names and the closest match).
    """
    fn = ADV_ESTIMATORS.get(name)
    if config is not None:
        kwargs = {**dataclasses.asdict(config), **kwargs}
    for key in estimator_inputs(name):
        if inputs is not None and key in inputs:
            kwargs[key] = inputs[key]
    rewards = kwargs.pop("token_level_rewards")
    mask = kwargs.pop("response_mask")
    return fn(rewards, mask, **kwargs)


def sequence_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """`(B,)` outcome score = Σ of token rewards over valid tokens (NaN stays NaN = unscorable)."""
    return masked_sum(token_level_rewards, response_mask, axis=-1)


def broadcast_to_tokens(seq_values: torch.Tensor, response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`(B,)` per-sequence values → `(B, R)`, exactly 0 on masked positions."""
    full = seq_values.to(dtype).unsqueeze(-1).expand(response_mask.shape)
    return zero_masked(full, response_mask)


@ADV_ESTIMATORS.register("gae")
@torch.no_grad()
def compute_gae_advantage_return(
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
    """Generalised Advantage Estimation (Schulman et al. 2016, arXiv 1506.02438).

    δ_t = r_t + γ V_{t+1} − V_t,  A_t = δ_t + γ λ A_{t+1},  returns_t = A_t + V_t,
    then A is whitened over valid tokens. Recursion runs over valid tokens only: a masked
    position (padding, or an observation/tool token inside a multi-turn response) is skipped,
    so its reward and value never leak — "t+1" means the next *valid* token; after the last
    valid token V = 0 and A = 0.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        values: `(B, R)` critic values V_t (required).
        gamma: discount γ.
        lam: GAE λ.

    Returns:
        (advantages `(B, R)` whitened, returns `(B, R)`), both 0 on masked positions.

    Raises:
        ValueError: if ``values`` is None or shaped differently from the rewards.
    """
    if values is None or values.shape != token_level_rewards.shape:
        raise ValueError("gae needs `values` with the same (B, R) shape as token_level_rewards")
    valid = response_mask != 0
    rewards = zero_masked(token_level_rewards, response_mask)
    vals = zero_masked(values.to(rewards.dtype), response_mask)
    batch, length = rewards.shape
    next_value = rewards.new_zeros(batch)
    last_gae = rewards.new_zeros(batch)
    adv = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        gae_t = delta + gamma * lam * last_gae
        next_value = torch.where(valid[:, t], vals[:, t], next_value)
        last_gae = torch.where(valid[:, t], gae_t, last_gae)
        adv[:, t] = last_gae
    returns = zero_masked(adv + vals, response_mask)
    return masked_whiten(adv, response_mask), returns


@ADV_ESTIMATORS.register("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
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
    """REINFORCE++ (Hu 2025, arXiv 2501.03262): discounted return-to-go, whitened over the batch.

    G_t = r_t + γ G_{t+1} over valid tokens (masked positions are skipped, as in `gae`);
    A = whiten(G) over all valid tokens of the batch.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        gamma: discount γ.

    Returns:
        (advantages `(B, R)`, returns G `(B, R)`), both 0 on masked positions.
    """
    valid = response_mask != 0
    rewards = zero_masked(token_level_rewards, response_mask)
    running = rewards.new_zeros(rewards.shape[0])
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    returns = zero_masked(returns, response_mask)
    return masked_whiten(returns, response_mask), returns


@ADV_ESTIMATORS.register("remax")
@requires_inputs("reward_baselines")
@torch.no_grad()
def compute_remax_outcome_advantage(
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
    """ReMax (Li et al. 2023, arXiv 2310.10505): A_t = G_t − b, b = score of the greedy response.

    G_t is the undiscounted return-to-go Σ_{t'≥t} r_t' over valid tokens; for outcome rewards
    (all reward on the last valid token) this is the sequence score on every valid token, so
    A = score − b broadcast over the response.

    Args:
        token_level_rewards: `(B, R)`.
        response_mask: `(B, R)`.
        reward_baselines: `(B,)` baseline score b per sample (required).

    Returns:
        (advantages `(B, R)`, returns G `(B, R)`), both 0 on masked positions.

    Raises:
        ValueError: if ``reward_baselines`` is None or not `(B,)`.
    """
    if reward_baselines is None or reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError("remax needs `reward_baselines` of shape (B,)")
    rewards = zero_masked(token_level_rewards, response_mask)
    returns = zero_masked(rewards.flip(-1).cumsum(-1).flip(-1), response_mask)
    baseline = broadcast_to_tokens(reward_baselines, response_mask, rewards.dtype)
    return returns - baseline, returns
