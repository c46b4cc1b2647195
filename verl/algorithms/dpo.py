"""Preference-optimisation losses over (chosen, rejected) pairs: DPO (sigmoid, cDPO) and IPO.

Notation per pair: ``π_c, π_r`` the policy's summed log-probs of the chosen / rejected
response, ``ρ_c, ρ_r`` the frozen reference's, and the log-ratio margin
``h = (π_c − π_r) − (ρ_c − ρ_r)``.

* ``sigmoid`` — DPO (Rafailov et al. 2023, "Direct Preference Optimization", eq. 7):
  ``L = −log σ(β h)``. With label smoothing ε (conservative DPO, Mitchell 2023, as in TRL):
  ``L = −(1 − ε) log σ(β h) − ε log σ(−β h)``, i.e. the preference label is flipped with
  probability ε.
* ``ipo`` — IPO (Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from
  Human Preferences", eq. 17): ``L = (h − 1 / (2β))²``. As in TRL, the caller passes
  *length-normalised* log-probs (mean over the response tokens) for IPO.

Implicit rewards (reported, never differentiated): ``r_c = β (π_c − ρ_c)``,
``r_r = β (π_r − ρ_r)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["DPO_LOSS_TYPES", "dpo_loss", "dpo_metric_sums"]

DPO_LOSS_TYPES = ("sigmoid", "ipo")
# Valid ``loss_type`` values.


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Per-pair preference losses `(B,)` (never reduced here; the caller divides by the global pair count).

    Args:
        policy_chosen_logps: `(B,)` log π(chosen | prompt) under the policy (summed over tokens;
            mean over tokens for ``ipo``).
        policy_rejected_logps: `(B,)` the same for the rejected response.
        ref_chosen_logps: `(B,)` the reference policy's, no gradient.
        ref_rejected_logps: `(B,)` the reference policy's, no gradient.
        beta: β > 0, the KL-regularisation strength (temperature of the implicit reward).
        loss_type: ``sigmoid`` (DPO / cDPO) or ``ipo``.
        label_smoothing: ε in [0, 0.5), ``sigmoid`` only (cDPO); 0 = plain DPO.

    Returns:
        `(B,)` float32 losses.

    Raises:
        ValueError: unknown ``loss_type``, β ≤ 0, ε outside [0, 0.5), or ε > 0 with ``ipo``.
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"unknown DPO loss_type {loss_type!r}; valid: {', '.join(DPO_LOSS_TYPES)}")
    if beta <= 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"DPO label_smoothing must be in [0, 0.5), got {label_smoothing}")
    h = (policy_chosen_logps.float() - policy_rejected_logps.float()) - (
        ref_chosen_logps.float() - ref_rejected_logps.float()
    )
    if loss_type == "ipo":
        if label_smoothing:
            raise ValueError("label_smoothing applies to the sigmoid (DPO) loss only, not to ipo")
        return (h - 1.0 / (2.0 * beta)) ** 2
    # logsigmoid is the stable form of log(sigmoid(x)): no log(0) for large |x|
    return -(1.0 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)


def dpo_metric_sums(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> dict[str, float]:
    """Per-batch *sums* of the DPO metrics; divide by the global pair count for the logged means.

    Sums (not means) so that micro-batches and data-parallel ranks add up exactly.

    Args:
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps: `(B,)`.
        beta: β of the implicit reward.

    Returns:
        ``rewards/chosen`` Σ β(π_c − ρ_c), ``rewards/rejected`` Σ β(π_r − ρ_r),
        ``rewards/accuracies`` #pairs with r_c > r_r, ``rewards/margins`` Σ (r_c − r_r),
        ``logps/chosen`` Σ π_c, ``logps/rejected`` Σ π_r.
    """
    with torch.no_grad():
        r_c = beta * (policy_chosen_logps.float() - ref_chosen_logps.float())
        r_r = beta * (policy_rejected_logps.float() - ref_rejected_logps.float())
        return {
            "rewards/chosen": float(r_c.sum()),
            "rewards/rejected": float(r_r.sum()),
            "rewards/accuracies": float((r_c > r_r).float().sum()),
            "rewards/margins": float((r_c - r_r).sum()),
            "logps/chosen": float(policy_chosen_logps.detach().float().sum()),
            "logps/rejected": float(policy_rejected_logps.detach().float().sum()),
        }
