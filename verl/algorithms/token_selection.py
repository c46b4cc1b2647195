"""Token-level statistics the actor update gathers over a mini-batch (pure tensor functions).

- `high_entropy_token_mask`: the tokens that keep their policy gradient under top-entropy
  selection (Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive
  Effective Reinforcement Learning for LLM Reasoning", arXiv 2506.01939);
- `rollout_mismatch_sums` / `mismatch_metrics_from_sums`: the rollout/training mismatch metrics
  of `verl.algorithms.rollout_correction.rollout_mismatch_metrics` as sums that add up over
  micro-batches and ranks (the update forward sees one micro-batch at a time).
"""

from __future__ import annotations

import math

import torch

from verl.algorithms.rollout_correction import LOG_RATIO_BOUND

__all__ = [
    "entropy_quantile_threshold",
    "high_entropy_token_mask",
    "mismatch_metrics_from_sums",
    "rollout_mismatch_sums",
]


def entropy_quantile_threshold(entropies: torch.Tensor, quantile: float) -> float:
    """τ = the ``(1 − quantile)`` quantile of ``entropies`` (linear interpolation, as ``torch.quantile``).

    Written with a sort so that any number of tokens works (``torch.quantile`` refuses inputs
    above 16M elements).

    Args:
        entropies: `(N,)` entropies of the mini-batch's response tokens (all ranks), N >= 1.
        quantile: ρ in (0, 1], the fraction of tokens kept.

    Raises:
        ValueError: ρ outside (0, 1] or no token.
    """
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"top-entropy quantile must be in (0, 1], got {quantile}")
    values = torch.sort(entropies.detach().double().flatten()).values
    if values.numel() == 0:
        raise ValueError("entropy_quantile_threshold needs at least one token")
    pos = (1.0 - quantile) * (values.numel() - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(values[lo] + (pos - lo) * (values[hi] - values[lo]))


def high_entropy_token_mask(entropy: torch.Tensor, response_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """`(B, R)` bool: response tokens whose entropy is >= ``threshold`` (the paper's I[H_t >= τ_ρ]).

    Args:
        entropy: `(B, R)` per-token entropy of the policy (nats).
        response_mask: `(B, R)`, nonzero on tokens that count.
        threshold: τ from `entropy_quantile_threshold` over the whole mini-batch.
    """
    return (response_mask != 0) & (entropy.detach() >= threshold)


def rollout_mismatch_sums(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """Additive sums of the mismatch statistics over the valid tokens, and max |Δp|.

    Args:
        train_log_probs, rollout_log_probs, response_mask: `(B, R)`.

    Returns:
        (`(5,)` float64 ``[tokens, Σ|Δp|, Σ|Δp|², Σ(log π_rollout − log π_train), Σ k3]``, max |Δp|
        (0.0 without a valid token)), with Δp = π_train − π_rollout and k3 = ρ − log ρ − 1 on the
        clamped log-ratio, as in `rollout_mismatch_metrics`.
    """
    valid = response_mask != 0
    train, rollout = train_log_probs.detach().double()[valid], rollout_log_probs.detach().double()[valid]
    diff = (train.exp() - rollout.exp()).abs()
    log_ratio = (train - rollout).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    sums = torch.stack(
        [
            torch.tensor(float(diff.numel()), dtype=torch.float64),
            diff.sum(),
            (diff * diff).sum(),
            (rollout - train).sum(),
            (log_ratio.exp() - log_ratio - 1).sum(),
        ]
    ).cpu()
    return sums, float(diff.max()) if diff.numel() else 0.0


def mismatch_metrics_from_sums(sums: torch.Tensor, diff_max: float) -> dict[str, float]:
    """The ``training/rollout_*`` metrics of `rollout_mismatch_metrics` from `rollout_mismatch_sums`.

    std is the population std (``unbiased=False``): sqrt(E[|Δp|²] − E[|Δp|]²), floored at 0
    (the subtraction can round below 0 when every |Δp| is equal).

    Args:
        sums: `(5,)` sums (over micro-batches and ranks) from `rollout_mismatch_sums`.
        diff_max: max |Δp| over the same tokens.

    Returns:
        The five metrics; {} when no token was valid.
    """
    tokens, s_diff, s_sq, s_k1, s_k3 = (float(v) for v in sums)
    if tokens <= 0:
        return {}
    mean = s_diff / tokens
    return {
        "training/rollout_probs_diff_max": diff_max,
        "training/rollout_probs_diff_mean": mean,
        "training/rollout_probs_diff_std": math.sqrt(max(s_sq / tokens - mean * mean, 0.0)),
        "training/rollout_kl": s_k1 / tokens,
        "training/rollout_k3_kl": s_k3 / tokens,
    }
