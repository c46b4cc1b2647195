"""Rollout/training mismatch: diagnostics, truncated importance sampling and rejection.

The rollout engine (vLLM, bf16 kernels, another attention path) samples from π_rollout while
the trainer optimises π_train (its own forward of the same weights). Their log-probs of the
same tokens differ; PPO's ratio uses π_old = π_train at rollout time, so the samples are
slightly off-policy. verl's ``algorithm.rollout_correction`` corrects this in two ways (Yao et
al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training",
https://fengyao.notion.site/off-policy-rl; Liu et al. 2025, "When Speed Kills Stability",
https://richardli.xyz/rl-collapse):

* truncated importance sampling (TIS): every token's policy loss is multiplied by
  ``w = min(π_train / π_rollout, C)``, per token (``rollout_is=token``) or with one weight per
  sequence, the product of its tokens' ratios (``rollout_is=sequence``);
* rejection sampling (RS): tokens / sequences whose ratio leaves ``[low, high]`` are dropped
  from the loss (their ``response_mask`` becomes 0): ``token_k1`` (per token),
  ``seq_sum_k1`` (ratio of whole sequences, exp Σ log ρ) or ``seq_mean_k1`` (geometric mean,
  exp mean log ρ).

Every function here is pure: tensors in, tensors and a metrics dict out. Shapes: `(B, R)`.
log ρ = log π_train − log π_rollout; exps are of log ρ clamped to [−20, 20] so they never overflow.
Masked slots (``response_mask == 0``) are *selected* away (``torch.where``), never multiplied by
0: whatever they hold (NaN, ±inf, an engine's sentinel), no weight, mask or metric changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from verl.algorithms.masked import masked_mean, masked_sum, zero_masked

__all__ = [
    "RolloutCorrectionParams",
    "apply_rollout_correction",
    "parse_ratio_bounds",
    "rollout_mismatch_metrics",
    "rollout_is_weights",
    "rollout_rejection_mask",
]

# exp(±20) ≈ 4.9e8 / 2.1e-9: a ratio beyond that is already rejected or truncated, never needed exactly.
LOG_RATIO_BOUND = 20.0
IS_LEVELS = ("token", "sequence")
RS_MODES = ("token_k1", "seq_sum_k1", "seq_mean_k1")


@dataclass(frozen=True)
class RolloutCorrectionParams:
    """The resolved ``algorithm.rollout_correction`` settings.

    Attributes:
        rollout_is: None (off) | ``token`` | ``sequence``.
        is_threshold: C, the truncation bound of the weights (> 0).
        is_batch_normalize: divide the weights by their batch mean (tokens, or sequences at
            sequence level) so they average 1.
        rollout_rs: None (off) | ``token_k1`` | ``seq_sum_k1`` | ``seq_mean_k1``.
        rs_low, rs_high: the kept ratio interval ``[low, high]`` of RS (0 < low <= high).
    """

    rollout_is: str | None = None
    is_threshold: float = 2.0
    is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rs_low: float = 0.5
    rs_high: float = 2.0


def parse_ratio_bounds(spec: float | str | None, key: str) -> tuple[float, float]:
    """``"low_high"`` or a single ``high`` (then low = 1 / high), as verl writes RS thresholds.

    Raises:
        ValueError: missing, unparsable, non-positive or inverted bounds (names ``key``).
    """
    if spec is None or isinstance(spec, bool):
        raise ValueError(f"{key}: must be set to 'low_high' or a single upper ratio bound, got {spec!r}")
    text = str(spec).strip()
    try:
        if "_" in text:
            low_s, high_s = text.split("_", 1)
            low, high = float(low_s), float(high_s)
        else:
            high = float(text)
            low = 1.0 / high if high > 0 else -1.0
    except ValueError:
        raise ValueError(f"{key}: must be 'low_high' or a number, got {spec!r}") from None
    if not (0 < low <= high) or not math.isfinite(high):
        raise ValueError(f"{key}: needs 0 < low <= high, got low={low}, high={high}")
    return low, high


def _log_ratio(train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Detached log ρ `(B, R)` in float32, exactly 0 on masked slots (selected, so NaN there never spreads)."""
    return zero_masked(train_log_probs.float() - rollout_log_probs.float(), mask).detach()


def _seq_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, mean: bool) -> torch.Tensor:
    """Σ (or mean) over valid tokens of log ρ, `(B,)`; 0 for an empty row."""
    total = masked_sum(log_ratio, mask, axis=-1)
    return total / mask.sum(-1).clamp(min=1) if mean else total


def rollout_is_weights(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: float,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance-sampling weights w = min(ρ, C) (TIS, Yao et al. 2025).

    token:    ρ_t = π_train(y_t) / π_rollout(y_t)
    sequence: ρ = Π_t ρ_t = exp(Σ_t log ρ_t), the same weight on every token of the sequence.

    Args:
        train_log_probs: `(B, R)` log π_train (``old_log_probs``).
        rollout_log_probs: `(B, R)` log π_rollout (the engine's sampling log-probs).
        response_mask: `(B, R)` 1 where a token counts.
        level: ``token`` | ``sequence``.
        threshold: C > 0.
        batch_normalize: rescale so the mean weight (over valid tokens, or over sequences at
            sequence level) is 1 after truncation.

    Returns:
        (weights `(B, R)`, detached, 0 on masked positions; metrics ``rollout_is_{mean,std,max,min}``
        over valid tokens of the applied weights, ``rollout_is_ratio_fraction_{high,low}`` = share
        of tokens (sequences) whose raw ρ is > C (< 1/C), ``rollout_is_eff_sample_size`` =
        1 / mean((w / mean w)²), and ``rollout_is_batch_norm_factor`` when normalising).

    Raises:
        ValueError: unknown level, C <= 0, or no valid token.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"rollout_is must be one of {', '.join(IS_LEVELS)}, got {level!r}")
    if threshold <= 0:
        raise ValueError(f"rollout_is_threshold must be > 0, got {threshold}")
    mask = (response_mask != 0).float()
    if mask.sum() == 0:
        raise ValueError("rollout_is_weights: response_mask has no valid token")
    log_ratio = _log_ratio(train_log_probs, rollout_log_probs, mask)
    if level == "token":
        raw_log = log_ratio
        seq_rows = None
    else:
        seq_rows = mask.sum(-1) > 0
        raw_log = _seq_log_ratio(log_ratio, mask, mean=False).unsqueeze(-1).expand_as(log_ratio)
    raw = torch.exp(raw_log.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    weights = zero_masked(raw.clamp(max=threshold), mask)
    metrics = _is_metrics(weights, raw_log, mask, threshold, seq_rows)
    if batch_normalize:
        if seq_rows is None:
            mean = masked_mean(weights, mask)
        else:
            mean = (masked_sum(weights, mask, axis=-1) / mask.sum(-1).clamp(min=1))[seq_rows].mean()
        # an all-zero batch of weights cannot be renormalised: keep the raw weights (factor 1)
        factor = float(mean) if float(mean) > 1e-8 else 1.0
        weights = weights / factor
        metrics["rollout_is_batch_norm_factor"] = factor
    return weights.detach(), metrics


def _is_metrics(
    weights: torch.Tensor,
    raw_log: torch.Tensor,
    mask: torch.Tensor,
    threshold: float,
    seq_rows: torch.Tensor | None,
) -> dict[str, float]:
    valid = mask.bool()
    w = weights[valid]
    if seq_rows is None:
        raw_units = raw_log[valid]
    else:
        raw_units = raw_log[:, 0][seq_rows] if raw_log.shape[1] else raw_log.new_zeros(0)
    log_c = math.log(threshold)
    normalised = w / w.mean().clamp(min=1e-8)
    return {
        "rollout_is_mean": float(w.mean()),
        "rollout_is_std": float(w.std(unbiased=False)),
        "rollout_is_max": float(w.max()),
        "rollout_is_min": float(w.min()),
        "rollout_is_ratio_fraction_high": float((raw_units > log_c).float().mean()),
        "rollout_is_ratio_fraction_low": float((raw_units < -log_c).float().mean()),
        "rollout_is_eff_sample_size": float(1.0 / normalised.square().mean()),
    }


def rollout_rejection_mask(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    mode: str,
    low: float,
    high: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Rejection of tokens / sequences whose ratio leaves ``[low, high]`` (k1 criteria, verl's RS).

    token_k1:    keep token t iff low <= ρ_t <= high
    seq_sum_k1:  keep the sequence iff low <= Π_t ρ_t <= high
    seq_mean_k1: keep the sequence iff low <= exp(mean_t log ρ_t) <= high   (geometric mean)

    Args:
        train_log_probs, rollout_log_probs, response_mask: `(B, R)` as in `rollout_is_weights`.
        mode: one of ``token_k1 | seq_sum_k1 | seq_mean_k1``.
        low, high: kept ratio interval, 0 < low <= high.

    Returns:
        (new response mask `(B, R)`, same dtype, rejected positions 0; metrics
        ``rollout_rs_masked_fraction`` = share of valid tokens dropped,
        ``rollout_rs_seq_masked_fraction`` = share of non-empty sequences that lost any token,
        ``rollout_rs_ratio_fraction_{high,low}`` = share of units above / below the interval).

    Raises:
        ValueError: unknown mode or invalid bounds.
    """
    if mode not in RS_MODES:
        raise ValueError(f"rollout_rs must be one of {', '.join(RS_MODES)}, got {mode!r}")
    if not (0 < low <= high):
        raise ValueError(f"rollout_rs_threshold needs 0 < low <= high, got low={low}, high={high}")
    mask = (response_mask != 0).float()
    log_ratio = _log_ratio(train_log_probs, rollout_log_probs, mask)
    if mode == "token_k1":
        unit_log, units = log_ratio, mask.bool()  # one unit per valid token
    else:
        unit_log = _seq_log_ratio(log_ratio, mask, mean=mode == "seq_mean_k1")
        units = mask.sum(-1) > 0  # one unit per non-empty sequence
    too_high = (unit_log > math.log(high)) & units
    too_low = (unit_log < math.log(low)) & units
    reject = too_high | too_low
    if mode != "token_k1":
        reject = reject.unsqueeze(-1).expand_as(mask)
    new_mask = response_mask * (~reject).to(response_mask.dtype)
    dropped = mask * reject.float()
    rows = mask.sum(-1) > 0
    n_units = units.sum().clamp(min=1)
    return new_mask, {
        "rollout_rs_masked_fraction": float(dropped.sum() / mask.sum().clamp(min=1)),
        "rollout_rs_seq_masked_fraction": float((dropped.sum(-1) > 0)[rows].float().mean())
        if bool(rows.any())
        else 0.0,
        "rollout_rs_ratio_fraction_high": float(too_high.sum() / n_units),
        "rollout_rs_ratio_fraction_low": float(too_low.sum() / n_units),
    }


def rollout_mismatch_metrics(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, float]:
    """How far the engine's sampling log-probs are from the trainer's, on valid tokens.

    ``training/rollout_probs_diff_{max,mean,std}`` = statistics of |π_train − π_rollout| (in
    probability space, as verl logs them); ``training/rollout_kl`` = mean over valid tokens of
    log π_rollout − log π_train (the k1 estimate of KL(π_rollout ‖ π_train) on the sampled
    tokens); ``training/rollout_k3_kl`` = mean of ρ − log ρ − 1 (k3, Schulman 2020,
    http://joschu.net/blog/kl-approx.html), never negative.

    Args:
        train_log_probs, rollout_log_probs, response_mask: `(B, R)`.

    Returns:
        The metrics above; {} when no token is valid.
    """
    valid = response_mask != 0
    if not bool(valid.any()):
        return {}
    train, rollout = train_log_probs.float()[valid].detach(), rollout_log_probs.float()[valid].detach()
    diff = (train.exp() - rollout.exp()).abs()
    log_ratio = (train - rollout).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return {
        "training/rollout_probs_diff_max": float(diff.max()),
        "training/rollout_probs_diff_mean": float(diff.mean()),
        "training/rollout_probs_diff_std": float(diff.std(unbiased=False)),
        "training/rollout_kl": float((rollout - train).mean()),
        "training/rollout_k3_kl": float((log_ratio.exp() - log_ratio - 1).mean()),
    }


def apply_rollout_correction(
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    params: RolloutCorrectionParams,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """RS, then TIS weights on what RS kept, as verl's ``rollout_correction`` does.

    Args:
        train_log_probs, rollout_log_probs, response_mask: `(B, R)`.
        params: the settings.

    Returns:
        (``rollout_is_weights`` `(B, R)` or None when IS is off, the response mask after
        rejection `(B, R)`, metrics prefixed ``rollout_corr/``).
    """
    metrics: dict[str, float] = {}
    mask = response_mask
    if params.rollout_rs is not None:
        mask, rs_metrics = rollout_rejection_mask(
            train_log_probs, rollout_log_probs, response_mask, params.rollout_rs, params.rs_low, params.rs_high
        )
        metrics.update(rs_metrics)
    weights = None
    if params.rollout_is is not None and bool((mask != 0).any()):
        weights, is_metrics = rollout_is_weights(
            train_log_probs, rollout_log_probs, mask, params.rollout_is, params.is_threshold, params.is_batch_normalize
        )
        metrics.update(is_metrics)
    elif params.rollout_is is not None:
        weights = torch.zeros_like(train_log_probs, dtype=torch.float32)
    return weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
