"""Per-thread CPU time and run-queue wait: did the overlapped threads get their cores?

``separate_async`` hides generation behind training only when the rollout thread and the
trainer thread compute at the same time, i.e. when the machine has a core free for each. Where
it does not (more runnable threads than cores, or a CPU share per process or session as
Linux's autogroup scheduling gives each session), both threads stay runnable but wait in the
run queue, and the run is no faster than one thread doing both in turn. The kernel counts both
figures per thread in ``/proc/<pid>/task/<tid>/schedstat`` (Linux ``sched_info``: nanoseconds on
a CPU, nanoseconds runnable but waiting, timeslices); `ThreadClock` reads their increments.

Metrics per step (`ThreadClock.take`), for a thread ``name``:

* ``{name}/cpu_s``: seconds the thread ran on a CPU during the step;
* ``{name}/runq_ratio``: share of the wall time since the previous step's figures that the
  thread was runnable but waited for a CPU (0 on free cores; near 1 - cores_available /
  runnable_threads when oversubscribed).

Platforms without ``schedstat`` (non-Linux, kernels without ``CONFIG_SCHED_INFO``) give no metrics.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["ThreadClock", "thread_times"]


def thread_times(native_id: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of thread ``native_id`` of this
    process since it started; None where the kernel does not report them (or the thread ended)."""
    try:
        with open(f"/proc/{os.getpid()}/task/{native_id}/schedstat") as f:
            fields = f.read().split()
    except OSError:
        return None
    if len(fields) < 2:
        return None
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


class ThreadClock:
    """Increments of `thread_times` of one thread between calls to `take`.

    Args:
        name: metric prefix (``trainer``, ``rollouter``).
        thread: the thread to watch (default: the calling one); it must have started.
    """

    def __init__(self, name: str, thread: threading.Thread | None = None) -> None:
        self.name = name
        native = (thread or threading.current_thread()).native_id
        self.native_id = int(native) if native is not None else -1
        self._last = thread_times(self.native_id) if native is not None else None
        self._wall = time.perf_counter()

    def take(self) -> dict[str, float]:
        """``{name}/cpu_s`` and ``{name}/runq_ratio`` since the previous call (or since the clock
        was made); {} where the kernel does not report them."""
        now = thread_times(self.native_id) if self._last is not None else None
        wall = time.perf_counter()
        if now is None or self._last is None:
            return {}
        cpu, runq = now[0] - self._last[0], now[1] - self._last[1]
        elapsed, self._last, self._wall = wall - self._wall, now, wall
        return {f"{self.name}/cpu_s": cpu, f"{self.name}/runq_ratio": min(runq / max(elapsed, 1e-9), 1.0)}
