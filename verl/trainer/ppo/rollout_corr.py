"""The trainer's rollout/training mismatch stage: metrics always, correction when configured.

Runs on the driver after advantages, just before the actor update (so advantage estimators and
the logged data statistics see the trajectories as generated):

* ``training/rollout_probs_diff_{max,mean,std}``, ``training/rollout_kl``,
  ``training/rollout_k3_kl`` whenever the batch has the engine's ``rollout_log_probs``;
* ``algorithm.rollout_correction``: rejection rewrites ``response_mask`` (rejected tokens leave
  the loss and its token count), truncated IS adds ``rollout_is_weights`` `(B, R)`, which the
  actor multiplies into the per-token policy loss; ``bypass_mode`` uses the engine's log-probs
  as ``old_log_probs`` and hands RS / IS to the actor's ``bypass_mode`` loss (``meta_info``
  `BYPASS_META_KEY`), which applies them per micro-batch to π_θ vs π_rollout, as verl does.
"""

from __future__ import annotations

from typing import Any

from verl.algorithms.rollout_correction import (
    RolloutCorrectionParams,
    apply_rollout_correction,
    parse_ratio_bounds,
    rollout_mismatch_metrics,
)
from verl.protocol import DataProto

__all__ = ["BYPASS_META_KEY", "bypass_old_log_probs", "correction_params", "rollout_correction_stage"]

BYPASS_META_KEY = "rollout_correction_bypass"
"""``meta_info`` key of a bypass-mode batch: ``{"loss_type", "rollout_correction"}`` for the actor's loss."""


def correction_params(rc: Any) -> RolloutCorrectionParams:
    """`RolloutCorrectionParams` of an ``algorithm.rollout_correction`` section."""
    low, high = (0.5, 2.0)
    if rc.rollout_rs is not None:
        low, high = parse_ratio_bounds(rc.rollout_rs_threshold, "algorithm.rollout_correction.rollout_rs_threshold")
    return RolloutCorrectionParams(
        rollout_is=rc.rollout_is,
        is_threshold=float(rc.rollout_is_threshold),
        is_batch_normalize=bool(rc.rollout_is_batch_normalize),
        rollout_rs=rc.rollout_rs,
        rs_low=low,
        rs_high=high,
    )


def bypass_old_log_probs(batch: DataProto) -> None:
    """``bypass_mode``: ``old_log_probs`` = the engine's ``rollout_log_probs`` (the old-log-prob forward is skipped).

    Raises:
        ValueError: the engine returned no ``rollout_log_probs``.
    """
    if "rollout_log_probs" not in batch.batch.keys():
        raise ValueError(
            "algorithm.rollout_correction.bypass_mode needs rollout_log_probs from the engine "
            "(rollout.calculate_log_probs=true)"
        )
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"].clone()


def rollout_correction_stage(batch: DataProto, rc: Any) -> dict[str, float]:
    """Mismatch metrics, then (if configured) bypass / rejection / IS weights, in place on ``batch``.

    Args:
        batch: trajectories with ``old_log_probs``, ``response_mask`` and, from the engine,
            ``rollout_log_probs`` `(B, R)`.
        rc: the ``algorithm.rollout_correction`` section.

    Returns:
        Metrics (empty when the batch has no ``rollout_log_probs``, with ``bypass_mode``, or with
        no ``old_log_probs`` yet because the step reuses the update forward's).

    Raises:
        ValueError: correction configured but the engine returned no ``rollout_log_probs``.
    """
    b = batch.batch
    active = rc.rollout_is is not None or rc.rollout_rs is not None or rc.bypass_mode
    if "rollout_log_probs" not in b.keys():
        if active:
            raise ValueError(
                "algorithm.rollout_correction needs rollout_log_probs from the engine "
                "(rollout.calculate_log_probs=true)"
            )
        return {}
    if rc.bypass_mode:
        # the actor's bypass_mode loss applies RS / IS per micro-batch to π_θ vs π_rollout (as verl);
        # no training log-probs exist to compare here (the old-log-prob forward is skipped)
        bypass_old_log_probs(batch)
        batch.meta_info[BYPASS_META_KEY] = {"loss_type": rc.loss_type, "rollout_correction": correction_params(rc)}
        return {}
    if "old_log_probs" not in b.keys():
        # on-policy reuse (verl.workers.actor.reuses_old_log_probs): the old log-probs come from the
        # update forward, after this stage; the trainer never reuses them with correction active
        return {}
    metrics = rollout_mismatch_metrics(b["old_log_probs"], b["rollout_log_probs"], b["response_mask"])
    if not active:
        return metrics
    weights, mask, corr_metrics = apply_rollout_correction(
        b["old_log_probs"], b["rollout_log_probs"], b["response_mask"], correction_params(rc)
    )
    b["response_mask"] = mask
    if weights is not None:
        b["rollout_is_weights"] = weights
    metrics.update(corr_metrics)
    return metrics
