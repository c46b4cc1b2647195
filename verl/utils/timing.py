"""Wall-clock timing of a short CPU computation: best of a few calls (used where a choice is measured).

`verl.utils.cpu_half` times half vs float32 matmuls, `verl.workers.rollout.hf.decode_head` two LM-head
layouts. The best (not the mean) of a few calls is the least disturbed by other processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["best_seconds"]


def best_seconds(
    fn: Callable[[], Any], repeats: int = 3, budget_s: float = float("inf"), warmup: Callable[[], Any] | None = None
) -> float:
    """Seconds of the fastest of up to ``repeats`` calls of ``fn`` (> 0).

    Args:
        fn: the computation.
        repeats: calls at most.
        budget_s: stop calling once this many seconds were spent (a slow ``fn`` is timed once).
        warmup: called once first, untimed (first-call dispatch, allocation); default ``fn``.
    """
    (warmup or fn)()
    best, spent = float("inf"), 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t
        best, spent = min(best, elapsed), spent + elapsed
        if spent > budget_s:
            break
    return max(best, 1e-9)
