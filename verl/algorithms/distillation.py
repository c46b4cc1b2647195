"""On-policy distillation losses: per-token divergences between the student and a frozen teacher.

The student samples the responses; the teacher scores the same tokens. Every registered loss has
one signature::

    losses, metrics = fn(inputs: DistillationInputs, *, loss_mode, log_prob_min_clamp=None, chunk_size=None)

``losses`` is `(B, R)` per-token and NOT reduced (the caller aggregates with `agg_loss`, or
turns it into per-token advantages with `distillation_advantages`). Two kinds (the entry's
``uses_topk`` attribute says which inputs it reads), as verl's ``verl/trainer/ppo/distillation/losses.py``:

- single-sample reverse-KL estimators of KL(π_s ‖ π_t) at the sampled token, Δ = log π_s(y) −
  log π_t(y) (Schulman 2020, http://joschu.net/blog/kl-approx.html): ``kl`` / ``k1`` = Δ,
  ``abs`` = |Δ|, ``mse`` / ``k2`` = ½Δ², ``low_var_kl`` / ``k3`` = exp(−Δ) + Δ − 1 (clamped at 10),
  the same estimators as the KL penalty (`verl.algorithms.kl.kl_penalty`). k1's gradient does not
  depend on the teacher, so it is used as a reward: advantage = −k1 = log π_t − log π_s
  (Thinking Machines, "On-Policy Distillation", 2025);
- ``forward_kl_topk``: KL(π_t ‖ π_s) over the teacher's top-k tokens of each position,
  Σ_k p_t,k (log p_t,k − log q_s,k) with q_s the student's full-vocabulary softmax gathered at the
  teacher's ids, clamped at 0 (both truncated distributions sum to < 1, so the sum can dip below
  0); a supervised loss (Agarwal et al. 2023, GKD, arXiv 2306.13649).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from verl.algorithms.kl import kl_penalty
from verl.utils.registry import Registry

__all__ = [
    "DISTILLATION_LOSSES",
    "DistillationInputs",
    "DistillationLossFn",
    "clamp_distillation_losses",
    "distillation_advantages",
    "estimator_distillation_loss",
    "forward_kl_topk",
    "forward_kl_topk_loss",
    "topk_log_probs",
]

ESTIMATOR_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


@dataclass
class DistillationInputs:
    """What a distillation loss may read (each entry reads the fields of its kind).

    Attributes:
        student_log_probs: `(B, R)` log π_s(y_t) under the rollout temperature, differentiable.
        teacher_log_probs: `(B, R)` log π_t(y_t) of the same tokens (estimator losses).
        student_logits: `(B, R, V)` student logits / temperature at the response positions
            (top-k losses), differentiable.
        teacher_topk_log_probs: `(B, R, K)` the teacher's K largest log-probs per position.
        teacher_topk_ids: `(B, R, K)` int64, their token ids.
    """

    student_log_probs: torch.Tensor | None = None
    teacher_log_probs: torch.Tensor | None = None
    student_logits: torch.Tensor | None = None
    teacher_topk_log_probs: torch.Tensor | None = None
    teacher_topk_ids: torch.Tensor | None = None


class DistillationLossFn(Protocol):
    """The signature of every registered distillation loss (see module docstring)."""

    uses_topk: bool

    def __call__(
        self,
        inputs: DistillationInputs,
        *,
        loss_mode: str,
        log_prob_min_clamp: float | None = None,
        chunk_size: int | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


DISTILLATION_LOSSES: Registry[Any] = Registry("distillation loss")


def estimator_distillation_loss(
    inputs: DistillationInputs,
    *,
    loss_mode: str,
    log_prob_min_clamp: float | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token reverse-KL estimate ``kl_penalty(log π_s, log π_t, loss_mode)`` `(B, R)`.

    Args:
        inputs: ``student_log_probs`` and ``teacher_log_probs``, `(B, R)`.
        loss_mode: one of ``kl, k1, abs, mse, k2, low_var_kl, k3``.
        log_prob_min_clamp: not read (verl applies it to top-k losses only).
        chunk_size: not read.

    Returns:
        ``(losses (B, R), {})``.

    Raises:
        ValueError: a missing input or an unknown mode.
    """
    if inputs.student_log_probs is None or inputs.teacher_log_probs is None:
        raise ValueError(f"distillation loss {loss_mode!r} needs student_log_probs and teacher_log_probs")
    if loss_mode not in ESTIMATOR_MODES:
        raise ValueError(f"unknown estimator {loss_mode!r}; valid: {', '.join(ESTIMATOR_MODES)}")
    teacher = inputs.teacher_log_probs.to(inputs.student_log_probs)
    return kl_penalty(inputs.student_log_probs, teacher, loss_mode), {}


estimator_distillation_loss.uses_topk = False  # type: ignore[attr-defined]
for _name in ESTIMATOR_MODES:
    DISTILLATION_LOSSES.add(_name, estimator_distillation_loss)


def topk_log_probs(logits: torch.Tensor, ids: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """``log_softmax(logits)`` gathered at ``ids``, float32, without a `(B, R, V)` log-softmax.

    ``log_softmax(z)[i] = z_i − logsumexp(z)``; the logsumexp runs over ``chunk_size`` positions
    at a time (None = all at once): same values, peak memory of one chunk.

    Args:
        logits: `(B, R, V)`.
        ids: `(B, R, K)` int64 indices into V.
        chunk_size: positions (of B·R) per logsumexp block; None or <= 0 = one block.

    Returns:
        `(B, R, K)` float32, differentiable in ``logits``.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    n = flat.shape[0]
    step = n if not chunk_size or chunk_size <= 0 else chunk_size
    log_z = (
        torch.cat([torch.logsumexp(flat[s : s + step].float(), dim=-1) for s in range(0, n, max(step, 1))])
        if n
        else flat.new_zeros(0, dtype=torch.float32)
    )
    picked = torch.gather(logits.float(), -1, ids.long())
    return picked - log_z.view(*logits.shape[:-1], 1)


def forward_kl_topk(
    student_topk_log_probs: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    log_prob_min_clamp: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Σ_k p_t,k (log p_t,k − log q_s,k) over the teacher's top-k ids, before the clamp at 0.

    Args:
        student_topk_log_probs: `(B, R, K)` log q_s at the teacher's top-k ids.
        teacher_topk_log_probs: `(B, R, K)` log p_t.
        log_prob_min_clamp: lower clamp applied to both log-probs (verl's ``log_prob_min_clamp``)
            after the masses are taken; None = none.

    Returns:
        ``(kl, student_mass, teacher_mass)``, each `(B, R)` float32; the masses are Σ_k exp(·)
        of the unclamped log-probs (how much probability the top-k tokens hold).
    """
    student, teacher = student_topk_log_probs.float(), teacher_topk_log_probs.float().to(student_topk_log_probs.device)
    student_mass, teacher_mass = student.exp().sum(-1), teacher.exp().sum(-1)
    if log_prob_min_clamp is not None:
        student, teacher = student.clamp_min(log_prob_min_clamp), teacher.clamp_min(log_prob_min_clamp)
    return (teacher.exp() * (teacher - student)).sum(-1), student_mass, teacher_mass


def forward_kl_topk_loss(
    inputs: DistillationInputs,
    *,
    loss_mode: str = "forward_kl_topk",
    log_prob_min_clamp: float | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Top-k forward KL `(B, R)`, clamped at 0 (see `forward_kl_topk`, module docstring).

    Args:
        inputs: ``student_logits`` `(B, R, V)` (already divided by the temperature),
            ``teacher_topk_log_probs`` and ``teacher_topk_ids`` `(B, R, K)`.
        loss_mode: ``forward_kl_topk``.
        log_prob_min_clamp: see `forward_kl_topk`.
        chunk_size: logsumexp block of `topk_log_probs` (``use_chunked_topk``); None = one block.

    Returns:
        ``(losses (B, R), metrics)``; metrics hold the per-position ``student_mass`` and
        ``teacher_mass`` `(B, R)` (detached) for masked reduction by the caller.

    Raises:
        ValueError: a missing input.
    """
    if inputs.student_logits is None or inputs.teacher_topk_log_probs is None or inputs.teacher_topk_ids is None:
        raise ValueError("forward_kl_topk needs student_logits, teacher_topk_log_probs and teacher_topk_ids")
    ids = inputs.teacher_topk_ids.to(inputs.student_logits.device)
    student = topk_log_probs(inputs.student_logits, ids, chunk_size)
    kl, s_mass, t_mass = forward_kl_topk(student, inputs.teacher_topk_log_probs, log_prob_min_clamp)
    return kl.clamp_min(0.0), {"student_mass": s_mass.detach(), "teacher_mass": t_mass.detach()}


forward_kl_topk_loss.uses_topk = True  # type: ignore[attr-defined]
DISTILLATION_LOSSES.add("forward_kl_topk", forward_kl_topk_loss)


def clamp_distillation_losses(losses: torch.Tensor, loss_max_clamp: float | None) -> torch.Tensor:
    """``clamp(losses, −c, c)`` (k1 can be negative, so both sides), as verl; None = unchanged."""
    return losses if loss_max_clamp is None else losses.clamp(min=-loss_max_clamp, max=loss_max_clamp)


def distillation_advantages(losses: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-token advantages of the policy-gradient form: ``−losses`` (detached), 0 off the mask.

    With k1 this is log π_t(y) − log π_s(y): the teacher's vote for each sampled token.

    Args:
        losses: `(B, R)` per-token distillation losses (after `clamp_distillation_losses`).
        response_mask: `(B, R)`.
    """
    return torch.where(response_mask.bool(), -losses.detach(), torch.zeros_like(losses))
