"""Divergence sentinel: the per-step checks that decide a step is numerically bad.

Five checks on the step's metrics (and its advantages), thresholds in ``trainer.sentinel``
(`verl.config.schema_guards.SentinelConfig`):

* ``non_finite``: a NaN/inf in the advantages or in an ``actor/``, ``critic/`` or ``training/``
  metric (always armed);
* ``grad_norm``: z = (log g - mean) / max(std, 0.25) of ``actor/grad_norm`` against the last
  ``window`` good steps above ``grad_norm_z`` (log scale: gradient norms are roughly
  log-normal, and a spike is a ratio);
* ``entropy``: the policy entropy left [H_prev / (1 + j), H_prev (1 + j)];
* ``reward_collapse``: ``critic/score/mean`` below the window mean by more than
  ``reward_collapse_z`` stds (std floored at 0.05);
* ``rollout_kl``: ``training/rollout_k3_kl`` (training vs rollout-engine policy) above
  ``rollout_kl_max`` (always armed).

Only good steps enter the running statistics, so a spike never hides the next one; statistics
are keyed by step, so steps re-run after a rollback replace their earlier values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from verl.config.schema_guards import SentinelConfig

LOG_STD_FLOOR = 0.25  # without a floor a flat start (std ~ 0) makes any wobble a huge z
REWARD_STD_FLOOR = 0.05
WATCHED_PREFIXES = ("actor/", "critic/", "training/")


def entropy_of(metrics: dict[str, float]) -> float | None:
    """The step's policy entropy: ``actor/entropy`` (update forward), else ``actor/entropy_rollout``."""
    for key in ("actor/entropy", "actor/entropy_rollout"):
        if key in metrics:
            return float(metrics[key])
    return None


class DivergenceSentinel:
    """Running statistics of good steps and the checks of one step.

    Args:
        cfg: ``trainer.sentinel``.
    """

    def __init__(self, cfg: SentinelConfig) -> None:
        self.cfg = cfg
        self.good: dict[int, dict[str, float]] = {}  # step -> {log_grad_norm, entropy, score}

    def check(
        self, step: int, metrics: dict[str, float], advantages: torch.Tensor | None
    ) -> tuple[list[str], dict[str, float]]:
        """The reasons step ``step`` trips (empty = good) and its ``sentinel/*`` metrics.

        Args:
            step: 1-based step number.
            metrics: the step's metrics (``actor/grad_norm``, entropy, ``critic/score/mean``,
                ``training/rollout_k3_kl`` when present).
            advantages: `(B, R)` the step's advantages, or None.

        Returns:
            (reasons, metrics); a good step is added to the running statistics.
        """
        reasons = self._non_finite(metrics, advantages)
        out: dict[str, float] = {}
        armed = len(self._recent()) >= self.cfg.warmup_steps
        for check in (self._grad_norm, self._entropy, self._reward):
            value, reason = check(metrics, armed)
            out.update(value)
            if reason:
                reasons.append(reason)
        kl = metrics.get("training/rollout_k3_kl")
        if kl is not None and math.isfinite(kl) and kl > self.cfg.rollout_kl_max:
            reasons.append(
                f"rollout_kl: training/rollout_k3_kl {kl:.4g} > trainer.sentinel.rollout_kl_max "
                f"{self.cfg.rollout_kl_max} (the rollout engine samples from another policy than the one trained)"
            )
        out["sentinel/tripped"] = 1.0 if reasons else 0.0
        if not reasons:
            self.good[step] = self._summary(metrics)
            self.good = {k: self.good[k] for k in sorted(self.good)[-self.cfg.window :]}  # only the window is read
        return reasons, out

    def state_dict(self) -> dict[str, Any]:
        """The running statistics as plain containers (saved with checkpoints)."""
        return {"good": {int(k): dict(v) for k, v in self.good.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict` (an empty dict = a fresh state)."""
        if state:
            self.good = {int(k): {n: float(x) for n, x in v.items()} for k, v in state["good"].items()}

    def forget_after(self, step: int) -> None:
        """Drop the statistics of steps after ``step`` (a rollback re-runs them)."""
        self.good = {k: v for k, v in self.good.items() if k <= step}

    # ------------------------------------------------------------------------------ checks
    def _recent(self) -> list[dict[str, float]]:
        return [self.good[k] for k in sorted(self.good)[-self.cfg.window :]]

    @staticmethod
    def _summary(metrics: dict[str, float]) -> dict[str, float]:
        g = metrics.get("actor/grad_norm")
        out = {
            "log_grad_norm": math.log(g) if g is not None and g > 0 else math.nan,
            "entropy": entropy_of(metrics),
            "score": metrics.get("critic/score/mean"),
        }
        return {k: float(v) for k, v in out.items() if v is not None}

    @staticmethod
    def _non_finite(metrics: dict[str, float], advantages: torch.Tensor | None) -> list[str]:
        bad = sorted(
            k
            for k, v in metrics.items()
            if k.startswith(WATCHED_PREFIXES) and isinstance(v, (int, float, np.number)) and not math.isfinite(float(v))
        )
        if advantages is not None and not bool(torch.isfinite(advantages).all()):
            bad.insert(0, "advantages")
        if not bad:
            return []
        return [f"non_finite: {', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''} not finite"]

    def _grad_norm(self, metrics: dict[str, float], armed: bool) -> tuple[dict[str, float], str | None]:
        g = metrics.get("actor/grad_norm")
        hist = [r["log_grad_norm"] for r in self._recent() if math.isfinite(r.get("log_grad_norm", math.nan))]
        if g is None or not math.isfinite(g) or g <= 0 or len(hist) < 2:
            return {}, None
        z = (math.log(g) - float(np.mean(hist))) / max(float(np.std(hist)), LOG_STD_FLOOR)
        if armed and z > self.cfg.grad_norm_z:
            return {"sentinel/grad_norm_z": z}, (
                f"grad_norm: actor/grad_norm {g:.4g} is z={z:.1f} (log scale) over the "
                f"last {len(hist)} good steps (geometric mean {math.exp(np.mean(hist)):.4g}; "
                f"trainer.sentinel.grad_norm_z={self.cfg.grad_norm_z})"
            )
        return {"sentinel/grad_norm_z": z}, None

    def _entropy(self, metrics: dict[str, float], armed: bool) -> tuple[dict[str, float], str | None]:
        h = entropy_of(metrics)
        recent = self._recent()
        prev = recent[-1].get("entropy") if recent else None
        if h is None or prev is None or not math.isfinite(h) or prev <= 0:
            return {}, None
        ratio = h / prev
        bound = 1.0 + self.cfg.entropy_jump
        if armed and (ratio > bound or ratio < 1.0 / bound):
            return {"sentinel/entropy_ratio": ratio}, (
                f"entropy: policy entropy {prev:.4g} -> {h:.4g} (x{ratio:.2f}; "
                f"trainer.sentinel.entropy_jump={self.cfg.entropy_jump} allows x{1 / bound:.2f}..x{bound:.2f})"
            )
        return {"sentinel/entropy_ratio": ratio}, None

    def _reward(self, metrics: dict[str, float], armed: bool) -> tuple[dict[str, float], str | None]:
        s = metrics.get("critic/score/mean")
        hist = [r["score"] for r in self._recent() if "score" in r]
        if s is None or not math.isfinite(s) or len(hist) < 2:
            return {}, None
        mean = float(np.mean(hist))
        z = (mean - s) / max(float(np.std(hist)), REWARD_STD_FLOOR)
        if armed and z > self.cfg.reward_collapse_z:
            return {"sentinel/reward_drop_z": z}, (
                f"reward_collapse: critic/score/mean {s:.4g} is {z:.1f} stds below the "
                f"last {len(hist)} good steps' mean {mean:.4g} "
                f"(trainer.sentinel.reward_collapse_z={self.cfg.reward_collapse_z})"
            )
        return {"sentinel/reward_drop_z": z}, None


def batch_digest(batch_dict: dict[str, Any]) -> str:
    """A content hash of a data-loader batch's prompts (``input_ids``), to recognise it after a rollback."""
    import hashlib

    ids = batch_dict.get("input_ids")
    h = hashlib.sha1()
    if isinstance(ids, torch.Tensor):
        h.update(ids.detach().cpu().contiguous().numpy().tobytes())
    else:
        h.update(repr(sorted(batch_dict)).encode())
    return h.hexdigest()
