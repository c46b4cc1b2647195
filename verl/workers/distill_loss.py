"""The actor's side of on-policy distillation: the student forward and the loss term per micro-batch.

The trainer puts the teacher's scores in the batch (``teacher_logprobs`` `(B, R)`, or
``teacher_logprobs`` / ``teacher_ids`` `(B, R, K)` for a top-k loss) and a
`DistillationLossParams` in ``meta_info["distillation"]``; `verl.workers.actor.policy_loss_fn`
then adds `distillation_term` to each micro-batch's loss, as verl's ``distillation_ppo_loss``
(``verl/trainer/ppo/distillation/losses.py``):

- ``use_task_rewards``: loss = PPO loss (task advantages, entropy, KL loss) + coef · distillation;
  otherwise the distillation loss alone;
- ``use_policy_gradient``: distillation = the clipped policy-gradient loss (vanilla) with
  per-token advantages −clamp(loss) (`verl.algorithms.distillation.distillation_advantages`),
  against the same behaviour log-probs as the task loss; otherwise the per-token loss itself,
  aggregated by ``actor.loss_agg_mode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verl.algorithms import POLICY_LOSSES, agg_loss
from verl.algorithms.distillation import (
    DISTILLATION_LOSSES,
    DistillationInputs,
    clamp_distillation_losses,
    distillation_advantages,
)
from verl.algorithms.logprob import logprobs_and_entropy_from_logits
from verl.algorithms.masked import masked_mean
from verl.modules.forward import response_logits
from verl.protocol import DataProto

__all__ = ["DistillationLossParams", "distillation_term", "student_forward"]


@dataclass(frozen=True)
class DistillationLossParams:
    """``distillation.distillation_loss`` as the actor needs it (travels in the batch's meta_info).

    Attributes:
        loss_mode: a `DISTILLATION_LOSSES` name.
        use_task_rewards, distillation_loss_coef, loss_max_clamp, log_prob_min_clamp,
        use_policy_gradient: as the config keys.
        chunk_size: the top-k logsumexp block (``chunked_topk_chunk_size`` when
            ``use_chunked_topk``, else None).
        clip_ratio_low, clip_ratio_high: the distillation policy gradient's clip range.
    """

    loss_mode: str
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: float | None = None
    log_prob_min_clamp: float | None = None
    use_policy_gradient: bool = False
    chunk_size: int | None = None
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2

    @property
    def uses_topk(self) -> bool:
        """Whether the loss reads the student's logits and the teacher's top-k."""
        return bool(DISTILLATION_LOSSES[self.loss_mode].uses_topk)

    @classmethod
    def from_config(cls, loss: Any) -> DistillationLossParams:
        """From a ``distillation.distillation_loss`` section."""
        low = loss.clip_ratio_low if loss.clip_ratio_low is not None else loss.clip_ratio
        high = loss.clip_ratio_high if loss.clip_ratio_high is not None else loss.clip_ratio
        return cls(
            loss.loss_mode,
            loss.use_task_rewards,
            loss.distillation_loss_coef,
            loss.loss_max_clamp,
            loss.log_prob_min_clamp,
            loss.use_policy_gradient,
            loss.chunked_topk_chunk_size if loss.use_chunked_topk else None,
            low,
            high,
        )


def student_forward(
    module: torch.nn.Module,
    micro: DataProto,
    temperature: float,
    calculate_entropy: bool,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One forward of the student giving log-probs `(B, R)`, entropy `(B, R)` and logits / τ `(B, R, V)`.

    The top-k losses need the full-vocabulary logits at the response positions, so this padded
    forward replaces the actor's usual one (same log-probs up to float rounding).
    """
    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    logits = response_logits(module, ids, mask, pos, b["responses"].shape[-1])
    log_prob, entropy = logprobs_and_entropy_from_logits(
        logits,
        b["responses"].to(device),
        chunk_size=chunk_size,
        compute_entropy=calculate_entropy,
        temperature=temperature,
    )
    return log_prob, entropy, logits.float() / temperature


def distillation_term(
    params: DistillationLossParams,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    student_logits: torch.Tensor | None,
    batch: Any,
    mask: torch.Tensor,
    agg: dict[str, Any],
    share: float,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The distillation loss of one micro-batch (already weighted: coef with task rewards) and its metrics.

    Args:
        params: the loss settings.
        log_prob: `(B, R)` student log-probs (differentiable).
        old_log_prob: `(B, R)` behaviour log-probs (the policy-gradient form's ratio denominator).
        student_logits: `(B, R, V)` logits / τ (top-k losses), else None.
        batch: the micro-batch's tensors (``teacher_logprobs``, ``teacher_ids``,
            ``rollout_is_weights`` when present).
        mask: `(B, R)` float response mask.
        agg: `agg_loss` keyword arguments (mode and the mini-batch's global counts).
        share: this micro-batch's share of the mini-batch's tokens (metrics sum to global means).

    Returns:
        ``(loss, metrics)``: ``distillation/loss`` (the aggregated term before the coefficient),
        ``distillation/abs_loss`` (masked mean of |loss|), the top-k masses ``distillation/student_mass``
        / ``teacher_mass``, and ``distillation/pg_clipfrac`` in the policy-gradient form.
    """
    device = log_prob.device
    teacher = batch["teacher_logprobs"].to(device)
    inputs = (
        DistillationInputs(
            student_logits=student_logits, teacher_topk_log_probs=teacher, teacher_topk_ids=batch["teacher_ids"]
        )
        if params.uses_topk
        else DistillationInputs(student_log_probs=log_prob, teacher_log_probs=teacher)
    )
    per_token, extra = DISTILLATION_LOSSES[params.loss_mode](
        inputs, loss_mode=params.loss_mode, log_prob_min_clamp=params.log_prob_min_clamp, chunk_size=params.chunk_size
    )
    per_token = clamp_distillation_losses(per_token, params.loss_max_clamp)
    metrics: dict[str, Any] = {"distillation/abs_loss": float(masked_mean(per_token.detach().abs(), mask)) * share}
    metrics.update({f"distillation/{k}": float(masked_mean(v, mask)) * share for k, v in extra.items()})
    if params.use_policy_gradient:
        pg, pg_metrics = POLICY_LOSSES["vanilla"](
            old_log_prob,
            log_prob,
            distillation_advantages(per_token, mask),
            mask,
            clip_ratio_low=params.clip_ratio_low,
            clip_ratio_high=params.clip_ratio_high,
        )
        if "rollout_is_weights" in batch.keys():
            pg = pg * batch["rollout_is_weights"].to(device)
        loss = agg_loss(pg, mask, **agg)
        metrics["distillation/pg_clipfrac"] = float(pg_metrics["pg_clipfrac"]) * share
    else:
        loss = agg_loss(per_token, mask, **agg)
    metrics["distillation/loss"] = loss.detach()
    coef = params.distillation_loss_coef if params.use_task_rewards else 1.0
    return coef * loss, metrics
