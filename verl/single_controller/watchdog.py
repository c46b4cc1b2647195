"""Hang watchdog for worker-group calls: deadlines from measured history, stack dumps on expiry.

Deadline of a call of method ``m`` (``trainer.hang_timeout_s`` = the floor ``F``):

- after ``m`` has returned at least once: ``max(F, 10 × median(durations of m))`` — a step that
  takes ten times longer than usual is not slow, it is stuck;
- before that (``init_model``, the first ``generate_sequences``, the first save): ``10 × F``,
  since first calls load models, compile and warm caches.

``F`` defaults to 300 s (so a first call may take 50 min); ``trainer.hang_timeout_s=0`` turns
the watchdog off. On expiry `dump_stacks` collects every worker's Python stack (all threads)
through `faulthandler`, which each worker registers on ``SIGUSR2`` at start-up into its own
file; a worker that is stopped (``SIGSTOP``, state ``T``) is sent ``SIGCONT`` so that it can
answer — it is killed right after. The stacks go to stderr and to
``<trainer.output_dir>/hang_stacks.txt``. Workers must run on the driver's machine for the
signals to reach them (single-node runs); on other nodes the stack file of that rank stays empty
and the report says so.

Neither verl, TRL nor OpenRLHF has this: a stuck collective there waits for Ray's own health
check (minutes) or forever.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import statistics
import time
from pathlib import Path
from typing import IO

DEFAULT_FLOOR_S = 300.0
HISTORY_FACTOR = 10.0
FIRST_CALL_FACTOR = 10.0
STACK_SIGNAL = signal.SIGUSR2
STACK_DIR_ENV = "VERL_STACK_DIR"


class CallDeadlines:
    """Per-method call history and the deadline derived from it (module docstring).

    Args:
        floor_s: ``trainer.hang_timeout_s``; None = `DEFAULT_FLOOR_S`; 0 or less = no deadlines.
    """

    def __init__(self, floor_s: float | None = None) -> None:
        self.floor_s = DEFAULT_FLOOR_S if floor_s is None else float(floor_s)
        self.history: dict[str, list[float]] = {}

    def record(self, method: str, seconds: float) -> None:
        """Add one completed call's wall time (seconds)."""
        self.history.setdefault(method, []).append(float(seconds))

    def deadline(self, method: str) -> float | None:
        """Seconds a call of ``method`` may take before it counts as hung; None = no deadline."""
        if self.floor_s <= 0:
            return None
        past = self.history.get(method)
        if not past:
            return FIRST_CALL_FACTOR * self.floor_s
        return max(self.floor_s, HISTORY_FACTOR * statistics.median(past))

    def explain(self, method: str) -> str:
        """How `deadline` was derived, for the error message."""
        past = self.history.get(method)
        if not past:
            return f"first call: {FIRST_CALL_FACTOR:g} x trainer.hang_timeout_s {self.floor_s:g} s"
        return (f"max(trainer.hang_timeout_s {self.floor_s:g} s, {HISTORY_FACTOR:g} x median {statistics.median(past):.3g} s "
                f"of {len(past)} earlier call(s))")


_STACK_FILE: IO[str] | None = None


def install_stack_dumper(tag: str) -> Path | None:
    """In a worker process: dump all threads' stacks to ``$VERL_STACK_DIR/<tag>.txt`` on SIGUSR2.

    Returns the file path (None when ``VERL_STACK_DIR`` is unset).
    """
    global _STACK_FILE
    directory = os.environ.get(STACK_DIR_ENV)
    if not directory:
        return None
    path = Path(directory) / f"{tag}.txt"
    _STACK_FILE = open(path, "w")  # kept open: faulthandler writes to its descriptor from the signal handler
    faulthandler.register(STACK_SIGNAL, file=_STACK_FILE, all_threads=True, chain=False)
    return path


def process_state(pid: int) -> str:
    """``running`` / ``sleeping`` / ``stopped`` / ``zombie`` / ``gone`` (psutil's names)."""
    import psutil

    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def dump_stacks(workers: list[tuple[int, int, Path]], wait_s: float = 5.0) -> dict[int, str]:
    """Signal each worker to dump its stacks and collect them.

    Args:
        workers: (rank, pid, stack file) per worker.
        wait_s: how long to wait for the files to be written.

    Returns:
        rank -> its stack text (or a line saying why there is none).
    """
    states = {rank: process_state(pid) for rank, pid, _ in workers}
    for rank, pid, _ in workers:
        if states[rank] == "gone":
            continue
        try:
            os.kill(pid, STACK_SIGNAL)
            if states[rank] == "stopped":
                os.kill(pid, signal.SIGCONT)  # a stopped process handles the signal only once continued
        except OSError:
            states[rank] = "gone"
    deadline = time.monotonic() + wait_s
    out: dict[int, str] = {}
    for rank, pid, path in workers:
        while time.monotonic() < deadline and not _complete(path):
            time.sleep(0.1)
        text = path.read_text() if path.is_file() else ""
        out[rank] = text.strip() or f"(no stack: process {pid} is {states[rank]}, or runs on another node)"
    return out


def _complete(path: Path) -> bool:
    """faulthandler ends a dump with the main thread's frames; give it a moment after the first bytes."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    time.sleep(0.2)
    return True


def format_report(role: str, method: str, elapsed: float, explain: str, pending: list[int],
                  workers: list[tuple[int, int, Path]], states: dict[int, str], stacks: dict[int, str]) -> str:
    """The multi-line report written to stderr and ``hang_stacks.txt``."""
    lines = [f"verl hang watchdog: {role}.{method}() did not return within the deadline ({elapsed:.1f} s; {explain}); "
             f"waiting on rank(s) {pending}"]
    for rank, pid, _ in workers:
        lines.append(f"--- {role} rank {rank} (pid {pid}, {states.get(rank, '?')}) ---")
        lines.append(stacks.get(rank, "(no stack)"))
    return "\n".join(lines) + "\n"
