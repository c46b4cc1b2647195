"""Live reward-hacking alarms: ``alarm/*`` metrics and one printed line when an alarm first fires.

Five alarms, each a cheap statistic of the step's batch or metrics (thresholds in
``trainer.alarms``, `verl.config.schema_guards.AlarmsConfig`):

* ``length_explosion``: the mean response length of the last ``window`` steps is
  ``length_growth`` x (and ``min_length_increase`` tokens over) the previous window's while the
  mean score rose: the policy may be paid for length (a "longer is better" reward, a judge that
  likes verbosity).
* ``zero_variance_groups``: the share of prompt groups whose samples all got the same score; such
  groups give group-baseline estimators (GRPO, RLOO) zero advantage, so training starves (DAPO,
  Yu et al. 2025, filters them for that reason).
* ``format_only_reward``: the share of the positive reward going to samples the scorer marks
  incorrect (``acc`` false): reward for the format, not the answer.
* ``train_val_divergence``: training score up since the best validation while validation
  accuracy fell below its best: the training reward is being gamed.
* ``clip_ratio``: the share of responses cut at ``max_response_length`` stays at the limit.

Each alarm reports ``alarm/<name>`` (1.0 while firing, else 0.0) and its measured value
``alarm/<name>_value`` whenever it is computable (the growth factor, the share, the validation
accuracy drop from its best, the clip ratio). Alarms never stop a run.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from verl.config.schema_guards import AlarmsConfig

ALARMS = ("length_explosion", "zero_variance_groups", "format_only_reward", "train_val_divergence", "clip_ratio")
TREND_ALARMS = frozenset({"length_explosion", "train_val_divergence"})
Reading = tuple[float, bool, str]
# (the measured value reported as alarm/<name>_value, whether the condition holds this step, the notice)


def zero_variance_share(scores: torch.Tensor, uids: np.ndarray) -> float:
    """Share of prompt groups whose samples all have the same score.

    Args:
        scores: `(B,)` sequence scores.
        uids: `(B,)` prompt-group ids (samples of one prompt share one).

    Returns:
        groups with max - min == 0 over all groups, in [0, 1]; groups of one sample count as
        zero-variance (they carry no group signal either).
    """
    if len(uids) == 0:
        return 0.0
    _, group = np.unique(np.asarray(uids).astype(str), return_inverse=True)
    values = scores.detach().double().cpu().numpy()
    lo = np.full(group.max() + 1, np.inf)
    hi = np.full(group.max() + 1, -np.inf)
    np.minimum.at(lo, group, values)
    np.maximum.at(hi, group, values)
    return float(np.mean(hi - lo == 0.0))


def format_only_share(scores: torch.Tensor, acc: np.ndarray) -> float:
    """Share of the positive reward earned by samples marked incorrect.

    Args:
        scores: `(B,)` sequence scores.
        acc: `(B,)` the scorer's per-sample correctness (bool or 0/1).

    Returns:
        sum(max(s, 0) over acc false) / sum(max(s, 0)), 0.0 when no sample has positive reward.
    """
    pos = scores.clamp(min=0).double()
    correct = torch.as_tensor(np.asarray(acc, dtype=float) > 0)
    total = float(pos.sum())
    return float(pos[~correct].sum()) / total if total > 0 else 0.0


def validation_accuracy(row: dict[str, float]) -> float | None:
    """``val/accuracy`` of a validation row, else the mean of its ``val-core/<source>/acc/mean@N``, else None."""
    if "val/accuracy" in row:
        return float(row["val/accuracy"])
    accs = [
        v
        for k, v in row.items()
        if k.startswith("val-core/") and k.split("/")[-2:-1] == ["acc"] and k.rsplit("/", 1)[-1].startswith("mean@")
    ]
    return float(np.mean(accs)) if accs else None


class RewardAlarms:
    """Per-run alarm state; `update` once per step.

    Args:
        cfg: ``trainer.alarms``.
        echo: where the one-line notice goes (default ``print``).
    """

    def __init__(self, cfg: AlarmsConfig, echo: Any = None) -> None:
        self.cfg = cfg
        self.echo = echo or (lambda line: print(line, flush=True))
        self.fired: set[str] = set()  # alarms already announced
        self._series: deque[tuple[float, float]] = deque(maxlen=2 * cfg.window)  # (score, length) per step
        self._streak = dict.fromkeys(ALARMS, 0)
        self._best_val: tuple[float, int] | None = None  # (accuracy, step)
        self._score_by_step: dict[int, float] = {}
        self._last_val: tuple[float, int] | None = None  # (accuracy, step) of the latest validation

    def state_dict(self) -> dict[str, Any]:
        """The alarm state as plain containers (saved with checkpoints, so a resumed run continues it)."""
        return {
            "fired": sorted(self.fired),
            "series": [list(x) for x in self._series],
            "streak": dict(self._streak),
            "best_val": list(self._best_val) if self._best_val is not None else None,
            "score_by_step": dict(self._score_by_step),
            "last_val": list(self._last_val) if self._last_val is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict` (an empty dict = a fresh state)."""
        if not state:
            return
        self.fired = set(state["fired"])
        self._series = deque((tuple(x) for x in state["series"]), maxlen=2 * self.cfg.window)
        self._streak = {**dict.fromkeys(ALARMS, 0), **state["streak"]}
        self._best_val = tuple(state["best_val"]) if state["best_val"] is not None else None
        self._score_by_step = {int(k): float(v) for k, v in state["score_by_step"].items()}
        self._last_val = tuple(state["last_val"]) if state.get("last_val") is not None else None

    def note_validation(self, step: int, metrics: dict[str, float]) -> None:
        """Record a validation's accuracy (`validation_accuracy` of its metrics) done after step ``step``."""
        acc = validation_accuracy(metrics)
        if acc is not None:
            self._last_val = (acc, step)

    def update(self, step: int, batch: Any, metrics: dict[str, float]) -> dict[str, float]:
        """The ``alarm/*`` metrics of step ``step`` (1-based).

        Args:
            step: the step these metrics belong to.
            batch: the step's `DataProto` (``token_level_scores`` `(B, R)`, ``uid``, optional ``acc``).
            metrics: the step's metrics so far (``critic/score/mean``, ``response_length/*``).
        """
        out: dict[str, float] = {}
        values: dict[str, Reading | None] = {
            "length_explosion": self._length(metrics),
            "zero_variance_groups": self._zero_variance(batch),
            "format_only_reward": self._format_only(batch),
            "train_val_divergence": self._divergence(step, metrics),
            "clip_ratio": self._clip(metrics),
        }
        for name, reading in values.items():
            hit = reading is not None and reading[1]
            # share and clip alarms need `patience` steps in a row; trend alarms already span windows
            self._streak[name] = self._streak[name] + 1 if hit else 0
            firing = hit and (name in TREND_ALARMS or self._streak[name] >= self.cfg.patience)
            if reading is not None:
                out[f"alarm/{name}_value"] = reading[0]
            out[f"alarm/{name}"] = 1.0 if firing else 0.0
            if firing and name not in self.fired:
                self.fired.add(name)
                self.echo(
                    f"ALARM step {step}: {name}: {reading[2]} (trainer.alarms; alarm/{name} stays 1 while it holds)"
                )
        return out

    # ------------------------------------------------------------------------ the statistics
    def _length(self, metrics: dict[str, float]) -> Reading | None:
        if "response_length/mean" not in metrics or "critic/score/mean" not in metrics:
            return None
        self._series.append((float(metrics["critic/score/mean"]), float(metrics["response_length/mean"])))
        w = self.cfg.window
        if len(self._series) < 2 * w:
            return None
        old, new = list(self._series)[:w], list(self._series)[w:]
        s0, s1 = np.mean([s for s, _ in old]), np.mean([s for s, _ in new])
        l0, l1 = np.mean([n for _, n in old]), np.mean([n for _, n in new])
        growth = float(l1 / max(l0, 1e-9))
        hit = growth >= self.cfg.length_growth and l1 - l0 >= self.cfg.min_length_increase and s1 > s0
        return (
            growth,
            hit,
            (
                f"response length {l0:.1f} -> {l1:.1f} tokens (x{growth:.2f}, threshold x{self.cfg.length_growth}) "
                f"while the mean score rose {s0:.3f} -> {s1:.3f} over two {w}-step windows"
            ),
        )

    def _zero_variance(self, batch: Any) -> Reading | None:
        if "uid" not in batch.non_tensor_batch or "token_level_scores" not in batch.batch.keys():
            return None
        share = zero_variance_share(batch.batch["token_level_scores"].sum(-1), batch.non_tensor_batch["uid"])
        return (
            share,
            share >= self.cfg.zero_variance_share,
            (
                f"{share:.0%} of the prompt groups have one score for every sample (threshold "
                f"{self.cfg.zero_variance_share:.0%} for {self.cfg.patience} steps): they give no learning signal"
            ),
        )

    def _format_only(self, batch: Any) -> Reading | None:
        if "acc" not in batch.non_tensor_batch or "token_level_scores" not in batch.batch.keys():
            return None
        try:
            share = format_only_share(batch.batch["token_level_scores"].sum(-1), batch.non_tensor_batch["acc"])
        except (TypeError, ValueError):  # a scorer whose acc is not a number
            return None
        return (
            share,
            share >= self.cfg.format_only_share,
            (
                f"{share:.0%} of the positive reward goes to samples the scorer marks incorrect (threshold "
                f"{self.cfg.format_only_share:.0%} for {self.cfg.patience} steps): reward for format, not answers"
            ),
        )

    def _divergence(self, step: int, metrics: dict[str, float]) -> Reading | None:
        if "critic/score/mean" in metrics:
            self._score_by_step[step] = float(metrics["critic/score/mean"])
        if self._last_val is None:
            return None
        acc, val_step = self._last_val
        if self._best_val is None or acc > self._best_val[0]:
            self._best_val = (acc, val_step)
        best, best_step = self._best_val
        self._score_by_step = {
            k: v for k, v in self._score_by_step.items() if k >= best_step
        }  # older ones are never read
        before = [s for k, s in self._score_by_step.items() if k == best_step]
        since = [s for k, s in self._score_by_step.items() if best_step < k <= val_step]
        if not since:
            return 0.0, False, "no training steps since the best validation"
        base = before[-1] if before else since[0]
        rise, drop = float(np.mean(since)) - base, best - acc
        hit = rise >= self.cfg.divergence_reward_rise and drop >= self.cfg.divergence_val_drop
        return (
            drop,
            hit,
            (
                f"training score +{rise:.3f} since the best validation (step {best_step}, "
                f"accuracy {best:.3f}) while validation accuracy fell to {acc:.3f} at step {val_step}"
            ),
        )

    def _clip(self, metrics: dict[str, float]) -> Reading | None:
        if "response_length/clip_ratio" not in metrics:
            return None
        r = float(metrics["response_length/clip_ratio"])
        return (
            r,
            r >= self.cfg.clip_ratio,
            (
                f"{r:.0%} of the responses hit max_response_length (threshold {self.cfg.clip_ratio:.0%} for "
                f"{self.cfg.patience} steps)"
            ),
        )
