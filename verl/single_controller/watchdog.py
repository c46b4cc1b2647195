"""Hang watchdog for worker-group calls: deadlines from measured history, stack dumps on expiry.

Calls are told apart by `call_key`: the method and the number of `DataProto` rows it is given
(a validation ``generate_sequences`` over 1,000 prompts is not timed against the training ones
over 64). Deadline of a call with key ``c`` (``trainer.hang_timeout_s`` = ``F``):

- the first call of ``c`` (``init_model``, the first ``generate_sequences``, the first save):
  ``10 × F``, since first calls load models, compile and warm caches (``F`` unset: 300 s, so
  ``3000 s``);
- once ``c`` has returned: ``max(H, 10 × the slowest earlier call of c)``, the first call left
  out once there are others (it includes compilation and loading): a call ten times slower
  than any before is not slow, it is stuck. ``H`` is ``F`` when set, else `HISTORY_FLOOR_S`
  (30 s): with the defaults a worker that stops mid-run (killed, SIGSTOPped, a dead collective)
  ends the run about 30 s + the stack dump after its call was due.

``trainer.hang_timeout_s=0`` turns the watchdog off. On expiry `dump_stacks` collects every
worker's Python stack (all threads)
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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

DEFAULT_FLOOR_S = 300.0  # F when trainer.hang_timeout_s is unset: a first call may take 10 x F
HISTORY_FLOOR_S = 30.0  # H when trainer.hang_timeout_s is unset: the least deadline of a call with history
HISTORY_FACTOR = 10.0
FIRST_CALL_FACTOR = 10.0
STACK_SIGNAL = signal.SIGUSR2
STACK_DIR_ENV = "VERL_STACK_DIR"


def call_key(method: str, per_args: Sequence[Sequence[Any]]) -> str:
    """``method``, with the `DataProto` rows its ranks are given (``generate_sequences[64 rows]``).

    Args:
        method: the registered method's name.
        per_args: each called rank's positional arguments (after dispatch).
    """
    rows = sum(len(a) for args in per_args for a in args if type(a).__name__ == "DataProto")
    return f"{method}[{rows} rows]" if rows else method


class CallDeadlines:
    """Per-call history and the deadline derived from it (module docstring).

    Args:
        floor_s: ``trainer.hang_timeout_s``; None = `DEFAULT_FLOOR_S` for first calls and
            `HISTORY_FLOOR_S` afterwards; 0 or less = no deadlines.
    """

    def __init__(self, floor_s: float | None = None) -> None:
        self.floor_s = DEFAULT_FLOOR_S if floor_s is None else float(floor_s)
        self.history_floor_s = HISTORY_FLOOR_S if floor_s is None else float(floor_s)
        self.history: dict[str, list[float]] = {}

    def record(self, key: str, seconds: float) -> None:
        """Add one completed call's wall time (seconds) under its `call_key`."""
        self.history.setdefault(key, []).append(float(seconds))

    @staticmethod
    def _slowest(past: list[float]) -> float:
        # the first call compiles and loads: once there are others it is left out
        return max(past[1:]) if len(past) > 1 else past[0]

    def deadline(self, key: str) -> float | None:
        """Seconds a call with `call_key` ``key`` may take before it counts as hung; None = no deadline."""
        if self.floor_s <= 0:
            return None
        past = self.history.get(key)
        if not past:
            return FIRST_CALL_FACTOR * self.floor_s
        return max(self.history_floor_s, HISTORY_FACTOR * self._slowest(past))

    def explain(self, key: str) -> str:
        """How `deadline` was derived, for the error message."""
        past = self.history.get(key)
        if not past:
            return f"first call of {key}: {FIRST_CALL_FACTOR:g} x {self.floor_s:g} s (trainer.hang_timeout_s)"
        which = "the first call" if len(past) == 1 else f"{len(past) - 1} call(s) after the first"
        return (
            f"max({self.history_floor_s:g} s, {HISTORY_FACTOR:g} x slowest {self._slowest(past):.3g} s of {which} "
            f"of {key})"
        )


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


def format_report(
    role: str,
    method: str,
    elapsed: float,
    explain: str,
    pending: list[int],
    workers: list[tuple[int, int, Path]],
    states: dict[int, str],
    stacks: dict[int, str],
) -> str:
    """The multi-line report written to stderr and ``hang_stacks.txt``."""
    lines = [
        f"verl hang watchdog: {role}.{method}() did not return within the deadline ({elapsed:.1f} s; {explain}); "
        f"waiting on rank(s) {pending}"
    ]
    for rank, pid, _ in workers:
        lines.append(f"--- {role} rank {rank} (pid {pid}, {states.get(rank, '?')}) ---")
        lines.append(stacks.get(rank, "(no stack)"))
    return "\n".join(lines) + "\n"
