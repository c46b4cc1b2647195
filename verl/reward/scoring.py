"""Scoring many responses under a deadline each, and when failures stop a run.

One core for every path that scores with a rule or custom ``compute_score``: the reward managers
(`verl.reward.managers`; the streaming path, `verl.reward.streaming`, calls a manager per
trajectory), ``verl eval`` (`verl.commands.evaluate`) and ``verl reward test``
(`verl.reward.probe`):

* `score_calls` makes the calls one after another in one scorer thread, each under its own
  deadline (`TimeoutCaller.call_many`), validates each output (`outcome_to_result`) and counts the
  failures (`FailureCounts`); `contain` does the last two for outcomes already made (the ``batch``
  manager's one batched call).
* `RewardFailurePolicy` decides when contained failures become an error.

The policy, the same for training and for ``verl eval``:

1. A call that raises, returns a non-number, NaN or ±inf, or runs past its deadline scores 0.0 and
   is counted (``errors``, non-finite included, ``nonfinite``, ``timeouts``); alone it never raises.
2. After `MAX_CONSECUTIVE_TIMEOUTS` (3) timeouts in a row within one `score_calls`, the scorer is
   taken as hung: the remaining calls are not made (each would cost the whole deadline) and count
   as timeouts (``skipped``).
3. A *step* fails when every call of it failed, or when its scorer was taken as hung.
4. ``patience`` failed steps in a row raise `RewardFailureError`; a step that does not fail resets
   the count. In training a step is one batch and ``patience`` is `FAILED_STEP_PATIENCE` (3): a
   verifier outage of a step or two is survived (its samples score 0 and are left out of the
   loss, `verl.trainer.ppo.reward_errors`). In ``verl eval`` the whole file is the one step, so
   ``patience`` is 1.

What changed when the three copies (managers, ``verl eval``, the trainer's check) became this one:
a training step whose scorer was taken as hung now counts as failed (before: only a step where
every sample failed); ``verl eval``'s ``num_errors`` now includes non-finite scores, as the
managers' ``reward/num_errors`` always did; training raises `RewardFailureError` (a
`RuntimeError`, and a `RewardFunctionError` that the command line prints as one line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.reward.manager_steps import SampleResult, outcome_to_result
from verl.reward.timeout import CallOutcome, TimeoutCaller
from verl.utils.errors import RewardFunctionError

__all__ = [
    "FAILED_STEP_PATIENCE",
    "MAX_CONSECUTIVE_TIMEOUTS",
    "FailureCounts",
    "RewardFailureError",
    "RewardFailurePolicy",
    "contain",
    "score_calls",
]

MAX_CONSECUTIVE_TIMEOUTS = 3
"""Timeouts in a row after which a scorer is taken as hung (the rest of its calls are not made)."""

FAILED_STEP_PATIENCE = 3
"""Failed training steps in a row that stop a run."""

COUNTERS = {"error": "num_errors", "nonfinite": "num_nonfinite", "timeout": "num_timeouts"}
"""Failure kind -> the count it is reported in (``reward/<count>`` in training)."""


class RewardFailureError(RewardFunctionError, RuntimeError):
    """The reward function failed on every sample, or hung, for ``patience`` steps in a row."""


@dataclass
class FailureCounts:
    """What failed among ``total`` scorer calls.

    Attributes:
        total: Calls scored.
        errors: Calls that raised or returned something unusable (non-finite scores included).
        nonfinite: Calls that returned NaN or ±inf (also counted in ``errors``).
        timeouts: Calls past their deadline, ``skipped`` ones included.
        skipped: Calls not made because the scorer was taken as hung (also in ``timeouts``).
        first: The first failure of each kind (``"error"``, ``"nonfinite"``, ``"timeout"``), as
            ``"<where>: <message>"``, in the order the kinds first occurred.
        hung_at: Where the last timeout before the skipped calls happened ("" when none skipped).
    """

    total: int = 0
    errors: int = 0
    nonfinite: int = 0
    timeouts: int = 0
    skipped: int = 0
    first: dict[str, str] = field(default_factory=dict)
    hung_at: str = ""

    @property
    def failed(self) -> int:
        """Calls that scored 0.0 for a failure (``errors + timeouts``)."""
        return self.errors + self.timeouts

    def __add__(self, other: FailureCounts) -> FailureCounts:
        """The counts of both (e.g. the trajectories of one batch scored one by one); ``first``
        and ``hung_at`` keep this one's where both have them."""
        first = dict(self.first)
        for kind, message in other.first.items():
            first.setdefault(kind, message)
        return FailureCounts(
            self.total + other.total,
            self.errors + other.errors,
            self.nonfinite + other.nonfinite,
            self.timeouts + other.timeouts,
            self.skipped + other.skipped,
            first,
            self.hung_at or other.hung_at,
        )

    def metrics(self, prefix: str = "reward/") -> dict[str, float]:
        """``{prefix}num_errors``, ``{prefix}num_nonfinite``, ``{prefix}num_timeouts`` as floats."""
        return {
            f"{prefix}num_errors": float(self.errors),
            f"{prefix}num_nonfinite": float(self.nonfinite),
            f"{prefix}num_timeouts": float(self.timeouts),
        }

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any], total: int) -> FailureCounts:
        """The counts a result reported only as ``reward/num_*`` metrics (a merged or foreign
        result); absent counts are 0, ``skipped`` and the messages are unknown."""

        def get(name: str) -> int:
            return int(metrics.get(f"reward/{name}", 0))

        return cls(total, get("num_errors"), get("num_nonfinite"), get("num_timeouts"))


def _default_label(i: int) -> str:
    return f"call {i}"


def contain(
    outcomes: Sequence[CallOutcome], label: Callable[[int], str] | None = None
) -> tuple[list[SampleResult], FailureCounts]:
    """Validates guarded-call outcomes and counts the failures.

    Args:
        outcomes: (N,) outcomes, in call order.
        label: ``label(i)`` says where call ``i`` comes from, for `FailureCounts.first` /
            ``hung_at`` (default ``"call i"``); called only for failures.

    Returns:
        (N,) `SampleResult` (score 0.0 unless ok) and the `FailureCounts`.
    """
    label = label or _default_label
    results = [outcome_to_result(o) for o in outcomes]
    counts = FailureCounts(total=len(results))
    for i, (outcome, result) in enumerate(zip(outcomes, results, strict=True)):
        if result.status == "ok":
            continue
        if result.status == "timeout":
            counts.timeouts += 1
            if outcome.skipped:
                counts.skipped += 1
                if not counts.hung_at:
                    counts.hung_at = label(max(i - 1, 0))
        else:
            counts.errors += 1
            counts.nonfinite += result.nonfinite
        kind = "nonfinite" if result.nonfinite else result.status
        if kind not in counts.first:
            counts.first[kind] = f"{label(i)}: {result.message}"
    return results, counts


def score_calls(
    fn: Callable[..., Any],
    calls: list[dict[str, Any]],
    caller: TimeoutCaller,
    label: Callable[[int], str] | None = None,
    stop_after_timeouts: int | None = MAX_CONSECUTIVE_TIMEOUTS,
) -> tuple[list[SampleResult], FailureCounts]:
    """``fn(**kw)`` for each ``kw`` of ``calls``, with failure containment (module docstring).

    Args:
        fn: The scorer, e.g. ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``
            returning a number or a dict with a numeric ``"score"``.
        calls: (N,) keyword arguments, one dict per call.
        caller: Runs the calls under ``caller.timeout_s`` seconds each (None: inline, no deadline).
        label: Where call ``i`` comes from, for the messages (see `contain`).
        stop_after_timeouts: Timeouts in a row after which the rest are skipped (None: never).

    Returns:
        (N,) `SampleResult` in call order and the `FailureCounts`. Never raises for the scorer's
        own errors.
    """
    return contain(caller.call_many(fn, calls, stop_after_timeouts=stop_after_timeouts), label)


class RewardFailurePolicy:
    """When contained failures stop training or ``verl eval`` (rules 3 and 4 of the module docstring).

    Args:
        patience: Failed steps in a row that raise (>= 1): `FAILED_STEP_PATIENCE` in training,
            1 for ``verl eval``.
        timeout_s: The scorer's deadline in seconds, named in the "looks hung" message.
        noun: What one call scores, for the messages (``"sample"``, ``"response"``).

    Raises:
        ValueError: ``patience`` < 1.
    """

    def __init__(
        self, patience: int = FAILED_STEP_PATIENCE, timeout_s: float | None = None, noun: str = "sample"
    ) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience, self.timeout_s, self.noun = patience, timeout_s, noun
        self.failed_steps = 0
        self._hung_steps = 0

    @staticmethod
    def step_failed(counts: FailureCounts) -> bool:
        """Whether a step with these counts failed: every call failed, or the scorer hung."""
        return counts.total > 0 and (counts.failed >= counts.total or counts.skipped > 0)

    def check(self, counts: FailureCounts) -> None:
        """Records one step's counts.

        Raises:
            RewardFailureError: This was the ``patience``-th failed step in a row; the message
                names the last step's first failure of each kind, or where the scorer hung.
        """
        if not self.step_failed(counts):
            self.failed_steps = self._hung_steps = 0
            return
        self.failed_steps += 1
        self._hung_steps += counts.skipped > 0
        if self.failed_steps >= self.patience:
            raise RewardFailureError(self._message(counts))

    def _message(self, counts: FailureCounts) -> str:
        first = "; ".join(f"{kind}: {message}" for kind, message in counts.first.items())
        if counts.skipped:
            detail = (
                f"the scorer timed out on {MAX_CONSECUTIVE_TIMEOUTS} {self.noun}s in a row, the last at "
                f"{counts.hung_at}: it looks hung; fix it or raise reward_model.timeout_s (now {self.timeout_s} s)"
            )
        else:
            detail = (
                f"the reward function failed on every one of the {counts.total} {self.noun}s, so there is "
                f"no score (first failure of each kind: {first})"
            )
        if self.patience == 1:
            return detail
        what = "failed (raised or timed out) on every " + self.noun
        if self._hung_steps:
            what = f"failed on every {self.noun} or looked hung"
        return f"the reward function {what} for {self.patience} consecutive steps; in the last one, {detail}"
