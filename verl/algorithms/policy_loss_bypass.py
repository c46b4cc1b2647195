"""Policy loss ``bypass_mode``: rollout correction inside the loss, registered in `POLICY_LOSSES`.

verl's ``algorithm.rollout_correction.bypass_mode`` skips the old-log-prob forward: the
engine's sampling log-probs π_rollout stand in for π_old (``old_log_prob`` here *is*
``rollout_log_probs``), and the loss compares the policy being optimised, π_θ, with π_rollout
micro-batch by micro-batch (as verl's ``compute_policy_loss_bypass_mode``):

- rejection sampling (``rollout_rs``) and IS weights (``rollout_is``) are computed from the
  detached log π_θ − log π_rollout by `apply_rollout_correction`; rejected tokens get loss 0;
- ``loss_type="ppo_clip"``: the PPO clipped loss of `compute_policy_loss_vanilla` on the kept
  tokens; its ratio π_θ / π_rollout already is the importance ratio, so no IS weight is applied;
- ``loss_type="reinforce"``: L = −sg[w] · A · log π_θ (REINFORCE with truncated IS weights w,
  w = 1 when ``rollout_is`` is off).

Same signature and per-token output as `policy_loss`; the rollout-correction metrics
(``rollout_corr/...``) are added to the metric dict as 0-d tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.masked import masked_mean, zero_masked
from verl.algorithms.policy_loss import POLICY_LOSSES, compute_policy_loss_vanilla, metrics, valid_only
from verl.algorithms.rollout_correction import RolloutCorrectionParams, apply_rollout_correction

__all__ = ["BYPASS_LOSS_TYPES", "compute_policy_loss_bypass_mode"]

BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")
"""``algorithm.rollout_correction.loss_type`` values."""


@POLICY_LOSSES.register("bypass_mode")
def compute_policy_loss_bypass_mode(
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
    """Bypass-mode loss (module docstring); Yao et al. 2025, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training" (TIS), as verl's ``bypass_mode`` loss.

    Args:
        old_log_prob: `(B, R)` log π_rollout (the engine's sampling log-probs).
        log_prob: `(B, R)` log π_θ, differentiable.
        **extra: ``loss_type`` (``ppo_clip`` default | ``reinforce``) and ``rollout_correction``
            (a `RolloutCorrectionParams`; default: no IS, no RS).

    Raises:
        ValueError: unknown ``loss_type``.
    """
    loss_type = extra.get("loss_type", "ppo_clip")
    if loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(
            f"rollout_correction.loss_type must be one of {', '.join(BYPASS_LOSS_TYPES)}, got {loss_type!r}"
        )
    params: RolloutCorrectionParams = extra.get("rollout_correction") or RolloutCorrectionParams()
    with torch.no_grad():
        weights, kept, corr_metrics = apply_rollout_correction(log_prob.detach(), old_log_prob, response_mask, params)
    if loss_type == "ppo_clip":
        pg_losses, out = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            advantages,
            kept,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
            clip_ratio_c=clip_ratio_c,
        )
    else:
        old_sel, lp, adv = valid_only(kept, old_log_prob, log_prob, advantages)
        pg_losses = -adv * lp
        if weights is not None:
            pg_losses = pg_losses * zero_masked(weights, kept).to(lp.dtype)
        pg_losses = zero_masked(pg_losses, kept)
        out = metrics(old_sel, lp, kept)
    out["ppo_kl"] = masked_mean(zero_masked(old_log_prob - log_prob, kept).detach(), kept)
    out.update({k: torch.as_tensor(float(v)) for k, v in corr_metrics.items()})
    return zero_masked(pg_losses, response_mask), out
