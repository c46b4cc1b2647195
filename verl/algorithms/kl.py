"""KL estimators, KL coefficient controllers, and the in-reward KL penalty.

Estimators of KL(π_θ ‖ π_ref) from samples y ~ π_θ (Schulman 2020, "Approximating KL
divergence", http://joschu.net/blog/kl-approx.html), with Δ = log π_θ(y) − log π_ref(y):

- ``kl`` / ``k1``:         Δ                       (unbiased, high variance, can be negative)
- ``abs``:                 |Δ|
- ``mse`` / ``k2``:        ½ Δ²
- ``low_var_kl`` / ``k3``: exp(−Δ) + Δ − 1 ≥ 0     (unbiased, low variance). As in verl, −Δ is
  clamped to [−20, 20] before exp, and the estimate is clamped to at most 10 (e.g.
  logp −3.0, ref −0.2 gives 12.6446 unclamped, 10.0 returned; above the cap the gradient
  is 0). There is no lower clamp: the estimate is never negative.
- ``<name>+`` (e.g. ``k3+``, ``k1+``, ``low_var_kl+``): straight-through — the forward value of
  ``<name>`` with the gradient of k2, whose expected gradient is the true KL gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.algorithms.masked import masked_mean, zero_masked

__all__ = [
    "KL_PENALTY_TYPES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "apply_kl_penalty",
    "get_kl_controller",
    "kl_penalty",
]

_BASE_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_PENALTY_TYPES: tuple[str, ...] = _BASE_TYPES + tuple(f"{t}+" for t in _BASE_TYPES)

K3_MAX = 10.0


def _kl_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    diff = logprob - ref_logprob
    if kind in ("kl", "k1"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("mse", "k2"):
        return 0.5 * diff.square()
    # k3: exp(−20) .. exp(20) keeps exp finite for absurd inputs.
    neg = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(neg) - neg - 1.0, max=K3_MAX)


def kl_penalty(
    logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    kl_penalty: str,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (see module docstring).

    Args:
        logprob: `(B, R)` log π_θ(y_t) (or the old/rollout policy's log-probs).
        ref_logprob: `(B, R)` log π_ref(y_t).
        kl_penalty: estimator name, one of `KL_PENALTY_TYPES`.
        response_mask: `(B, R)`, optional. When given, both inputs are selected on it first
            (masked slots set to 0 by ``torch.where``), so the estimate *and its gradient* are
            exactly 0 there whatever the slots held; a later masked reduction alone cannot stop
            a NaN in ``ref_logprob`` from reaching ``logprob``'s gradient (``0 · NaN = NaN``).

    Returns:
        `(B, R)` per-token estimate (without ``response_mask``: not masked; reduce with a mask).

    Raises:
        ValueError: unknown estimator (lists the valid names).
    """
    if kl_penalty not in KL_PENALTY_TYPES:
        raise ValueError(f"unknown kl_penalty {kl_penalty!r}; valid: {', '.join(KL_PENALTY_TYPES)}")
    if response_mask is not None:
        logprob, ref_logprob = zero_masked(logprob, response_mask), zero_masked(ref_logprob, response_mask)
    straight_through = kl_penalty.endswith("+")
    kind = kl_penalty.rstrip("+")
    forward = _kl_forward(logprob, ref_logprob, kind)
    if not straight_through or kind in ("mse", "k2"):
        return forward
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + forward.detach()


class FixedKLController:
    """Constant KL coefficient β.

    Args:
        kl_coef: β.
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (the fixed coefficient never changes)."""
        del current_kl, n_steps

    def state_dict(self) -> dict[str, float]:
        """Checkpointable state."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict`."""
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive β (Ziegler et al. 2019, arXiv 1909.08593, §2.2).

    e = clip(KL / KL_target − 1, −0.2, 0.2);  β ← β · (1 + e · n_steps / horizon).

    ``current_kl`` is the batch mean over sequences of each sequence's per-token KL averaged
    over its response-mask tokens (what `apply_kl_penalty` reports); ``n_steps`` counts the
    sequences (trajectories) in that batch.

    Args:
        init_kl_coef: initial β.
        target_kl: KL_target (same units as ``current_kl``), > 0.
        horizon: number of sequences over which β may change by a factor e, > 0.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl} and {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move β towards the target after a batch of ``n_steps`` sequences with KL ``current_kl``."""
        error = float(np.clip(float(current_kl) / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        """Checkpointable state (β; target and horizon come from the config)."""
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore β from `state_dict` (target and horizon stay as configured)."""
        self.value = float(state["value"])


KLController = FixedKLController | AdaptiveKLController


def get_kl_controller(
    type: str, kl_coef: float, target_kl: float | None = None, horizon: float | None = None
) -> KLController:
    """Build the controller for ``algorithm.kl_ctrl``.

    Args:
        type: ``"fixed"`` or ``"adaptive"``.
        kl_coef: (initial) β.
        target_kl: adaptive target KL.
        horizon: adaptive horizon, in sequences.

    Raises:
        ValueError: unknown type, or adaptive without a positive target/horizon.
    """
    if type == "fixed":
        return FixedKLController(kl_coef)
    if type == "adaptive":
        if target_kl is None or horizon is None:
            raise ValueError("the adaptive KL controller needs target_kl and horizon")
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown kl_ctrl type {type!r}; valid: fixed, adaptive")


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kl_penalty_type: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """In-reward KL: r_t = score_t − β · kl_t, then update the controller.

    kl_t and r_t are exactly 0 on padded positions whatever the inputs hold there. The quantity fed
    to the controller (and logged as ``actor/reward_kl_penalty``) is the batch mean over
    sequences of each sequence's masked per-token mean KL; ``n_steps`` = number of sequences B.
    ``actor/reward_kl_penalty_coeff`` is the β used for these rewards (before the update).

    Args:
        token_level_scores: `(B, R)` task scores per token.
        old_log_prob: `(B, R)` log-probs of the behaviour policy.
        ref_log_prob: `(B, R)` log-probs of the reference policy.
        response_mask: `(B, R)`.
        kl_ctrl: controller providing β (`.value`); updated in place.
        kl_penalty_type: estimator name (see `kl_penalty`).

    Returns:
        (token_level_rewards `(B, R)`, metrics).
    """
    kld = kl_penalty(old_log_prob, ref_log_prob, kl_penalty_type, response_mask)
    beta = kl_ctrl.value
    rewards = zero_masked(token_level_scores, response_mask) - beta * kld
    has_tokens = (response_mask != 0).any(-1)
    per_seq = masked_mean(kld, response_mask, axis=-1)
    current_kl = float(masked_mean(per_seq, has_tokens))
    kl_ctrl.update(current_kl=current_kl, n_steps=int(token_level_scores.shape[0]))
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": float(beta)}
