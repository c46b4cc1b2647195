"""Streaming rewards: score each trajectory as soon as it finishes, while the others generate.

A synchronous step generates the whole batch, then scores it: the reward's time adds to the
generation's. `StreamingRewardScorer` takes trajectories (one or a few rows of a `DataProto`) the
moment the engine finishes them (`verl.workers.rollout.streaming.generate_and_score` wires the
engines' finish hooks to `StreamingRewardScorer.submit`) and scores them in a pool of worker
threads, so scoring overlaps the decoding of the rows still running; `merge_scored` puts the
pieces back in row order in the reward managers' result layout.

What scores: anything with the reward managers' call shape ``fn(data, return_dict=True) ->
{"reward_tensor": (b, R), "reward_extra_info": {key: list of b}, "reward_metrics": {...}}``:
the ``naive`` / ``dapo`` / ``gdpo`` / ``batch`` managers with a rule scorer or a custom
``compute_score`` (`verl.reward.managers`), or a reward model through `RewardModelScorer`.

Containment: each call to a manager scores its rows under the manager's own per-sample deadline
(``timeout_s``, `verl.reward.timeout.TimeoutCaller`): a slow or hung scorer costs its sample a 0
reward and a ``reward_timeout`` flag after ``timeout_s``, in one pool thread, while the other
threads go on scoring the other trajectories. A manager built with ``timeout_s=None`` has no
deadline: a hung scorer then holds its pool thread for good (the others still run). An exception
that escapes the manager (a configuration error such as an unknown data source) is raised by
`merge_scored`, not swallowed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from verl.protocol import DataProto
from verl.reward.scoring import FailureCounts
from verl.reward.timeout import TimeoutCaller

__all__ = ["RewardModelScorer", "ScoredItem", "StreamingRewardScorer", "merge_scored"]

RewardFn = Callable[..., dict[str, Any]]


@dataclass
class ScoredItem:
    """The reward of one submission.

    Attributes:
        rows: the submission's row indices in the caller's batch (as given to `submit`).
        reward_tensor: `(b, R)` float32 token-level scores.
        extra_info: per-row values, each a list of b.
        metrics: the manager's counts (``reward/num_errors``, ``reward/num_timeouts``, ...).
        seconds: wall time of the scoring call.
        failures: the manager's `FailureCounts` (None when its result has none).
    """

    rows: list[int]
    reward_tensor: torch.Tensor
    extra_info: dict[str, list[Any]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    failures: FailureCounts | None = None


class StreamingRewardScorer:
    """A pool of threads that score submitted trajectories as they come.

    Args:
        reward_fn: a reward manager (or anything with its call shape, module docstring).
        max_workers: scoring threads (>= 1); a scorer that sleeps or waits on I/O (a verifier
            service) overlaps itself too, a CPU-bound Python scorer shares the GIL.
        on_scored: optional callback run in the scoring thread with each `ScoredItem` (e.g. to
            mark a prompt group of a replay buffer as scored).

    Raises:
        ValueError: ``max_workers`` < 1.
    """

    def __init__(
        self, reward_fn: RewardFn, max_workers: int = 4, on_scored: Callable[[ScoredItem], None] | None = None
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.reward_fn, self.on_scored = reward_fn, on_scored
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="verl-reward-stream")
        self._lock = threading.Lock()
        self.busy_s = 0.0  # summed scoring time of every call (to compare with the wall time)

    def submit(self, data: DataProto, rows: Sequence[int] | None = None) -> Future[ScoredItem]:
        """Score ``data`` (its rows finished) in the pool; returns at once.

        Args:
            data: rows in a reward manager's input layout (``responses``, ``response_mask``,
                ``prompts``, non-tensors ``data_source`` / ``reward_model`` / ``extra_info``).
            rows: their indices in the caller's batch (default ``0..len(data)-1``).
        """
        index = list(rows) if rows is not None else list(range(len(data)))
        return self._pool.submit(self._score, data, index)

    def submit_each(self, data: DataProto, rows: Sequence[int] | None = None) -> list[Future[ScoredItem]]:
        """`submit` every row on its own: rows handed over together (a micro-batch that finished
        at the same step) are scored in parallel, one trajectory per call."""
        index = list(rows) if rows is not None else list(range(len(data)))
        return [self.submit(data[k : k + 1], [row]) for k, row in enumerate(index)]

    def _score(self, data: DataProto, rows: list[int]) -> ScoredItem:
        start = time.perf_counter()
        result = self.reward_fn(data, return_dict=True)
        item = ScoredItem(
            rows=rows,
            reward_tensor=result["reward_tensor"],
            extra_info={k: list(v) for k, v in (result.get("reward_extra_info") or {}).items()},
            metrics=dict(result.get("reward_metrics") or {}),
            seconds=time.perf_counter() - start,
            failures=result.get("reward_failures"),
        )
        with self._lock:
            self.busy_s += item.seconds
        if self.on_scored is not None:
            self.on_scored(item)
        return item

    def close(self, wait: bool = True) -> None:
        """Stop the pool (``wait``: after the submitted calls end)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> StreamingRewardScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_scored(
    futures: Sequence[Future[ScoredItem]], n: int, width: int, timeout_s: float | None = None
) -> dict[str, Any]:
    """The scored submissions of one batch, in the reward managers' result layout.

    Args:
        futures: what `StreamingRewardScorer.submit` returned, covering rows ``0..n-1`` once each.
        n: rows of the batch (B).
        width: response columns (R).
        timeout_s: longest wait for each result (None = no limit).

    Returns:
        ``{"reward_tensor": (B, R), "reward_extra_info": {key: list of B} (None where a row's
        manager did not report the key), "reward_metrics": summed counts}``, and
        ``"reward_failures"``: the summed `FailureCounts` when every submission reported them (the
        first failures' ``sample i`` is then the row's index in its own submission).

    Raises:
        ValueError: the submissions do not cover every row exactly once.
        Exception: an error raised by the reward function itself (not a contained sample).
    """
    reward = torch.zeros(n, width, dtype=torch.float32)
    extra: dict[str, list[Any]] = {}
    metrics: dict[str, float] = {}
    seen: list[int] = []
    failures: FailureCounts | None = FailureCounts()
    for fut in futures:
        item = fut.result(timeout=timeout_s)
        failures = failures + item.failures if failures is not None and item.failures is not None else None
        reward[item.rows] = item.reward_tensor.to(torch.float32).reshape(len(item.rows), width)
        for key, values in item.extra_info.items():
            column = extra.setdefault(key, [None] * n)
            for row, value in zip(item.rows, values, strict=True):
                column[row] = value
        for key, value in item.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + float(value)
        seen += item.rows
    if sorted(seen) != list(range(n)):
        raise ValueError(f"scored rows do not cover the batch of {n} rows exactly once: {sorted(seen)}")
    out: dict[str, Any] = {"reward_tensor": reward, "reward_extra_info": extra, "reward_metrics": metrics}
    if failures is not None and futures:
        out["reward_failures"] = failures
    return out


class RewardModelScorer:
    """A reward model in the reward managers' call shape, for `StreamingRewardScorer`.

    Args:
        reward_model: anything with ``compute_rm_score(data) -> DataProto`` holding ``rm_scores``
            `(b, R)` (the reward-model worker group, `verl.workers.fsdp_workers`).
        timeout_s: deadline of one call (None = none); a call past it gives its rows 0 and
            ``reward_timeout`` True, one that raises gives 0 and ``reward_error`` True.
    """

    def __init__(self, reward_model: Any, timeout_s: float | None = None) -> None:
        self.reward_model = reward_model
        self._caller = TimeoutCaller(timeout_s)

    def __call__(self, data: DataProto, return_dict: bool = True) -> Any:
        """``{"reward_tensor": rm_scores (b, R), "reward_extra_info": flags, "reward_metrics": counts,
        "reward_failures": FailureCounts}`` (a failed call fails its b rows)."""
        outcome = self._caller(lambda: self.reward_model.compute_rm_score(data).batch["rm_scores"])
        n = len(data)
        ok = outcome.status == "ok"
        scores = outcome.value if ok else torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        extra = {"reward_error": [outcome.status == "error"] * n, "reward_timeout": [outcome.status == "timeout"] * n}
        metrics = {
            "reward/num_errors": float(n * (outcome.status == "error")),
            "reward/num_timeouts": float(n * (outcome.status == "timeout")),
        }
        failures = FailureCounts(
            n,
            errors=int(metrics["reward/num_errors"]),
            timeouts=int(metrics["reward/num_timeouts"]),
            first={} if ok else {outcome.status: f"rows 0-{n - 1}: {outcome.error}"},
        )
        result = {
            "reward_tensor": scores,
            "reward_extra_info": extra,
            "reward_metrics": metrics,
            "reward_failures": failures,
        }
        return result if return_dict else scores
