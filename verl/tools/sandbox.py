"""Running untrusted Python code from a model in a contained child process.

Each run gets (see `verl.tools._sandbox_child` for the child side):

* **a separate process** (``python -I -B``: no user site, no ``PYTHON*`` variables, no
  bytecode writes) in its **own session / process group**, with a clean environment;
* **a fresh temporary working directory** (``TMPDIR`` and ``HOME`` point into it), deleted after;
* **limits**: CPU seconds (``RLIMIT_CPU``: SIGXCPU), address space (``RLIMIT_AS``: MemoryError),
  largest written file (``RLIMIT_FSIZE``), no core dumps, and a **wall-clock timeout** after
  which the whole process group is SIGKILLed (also when the caller's task is cancelled);
* **no network**: a new, empty network namespace (``unshare(CLONE_NEWNET)``; as a non-root user
  together with a user namespace) — a kernel barrier: only a loopback device that is down; and a
  Python audit hook (PEP 578) refusing every ``socket.*`` event with a clear PermissionError;
* **writes only inside the working directory**: the audit hook refuses ``open`` for writing,
  remove, rename, mkdir, chmod, link and similar outside it; it also refuses new processes
  (fork, exec, subprocess, os.system), signals (os.kill) and ctypes foreign calls, which would
  otherwise step around the hook;
* **bounded output**: stdout and stderr are read as they come, keeping at most
  ``max_output_bytes`` of each (head and tail), so a flood costs the parent no memory.

Honest limits: the write and process rules are Python-level (PEP 578 hooks are not a security
boundary against native code: a C extension already importable, e.g. numpy, can still write
files through its own C calls); reads anywhere the user can read are allowed. When the kernel
refuses namespaces (some containers), only the audit hook blocks the network, and
`SandboxResult.network_isolation` says ``"none"``. For hostile code use a container or VM
sandbox in addition (what verl's SandboxFusion service provides).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]

_CHILD = Path(__file__).with_name("_sandbox_child.py")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run.

    Attributes:
        timeout_s: wall-clock seconds before the process group is killed.
        cpu_time_s: CPU seconds (``RLIMIT_CPU``), whole seconds ≥ 1.
        memory_mb: address space in MiB (``RLIMIT_AS``); the interpreter itself needs ~30.
        max_output_bytes: bytes kept per stream (half from the start, half from the end).
        max_file_bytes: largest file the code may write (``RLIMIT_FSIZE``).
        isolate_network: enter a new network namespace (the audit hook refuses sockets anyway).
    """

    timeout_s: float = 10.0
    cpu_time_s: int = 5
    memory_mb: int = 512
    max_output_bytes: int = 64 * 1024
    max_file_bytes: int = 16 * 1024 * 1024
    isolate_network: bool = True

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.cpu_time_s < 1 or self.memory_mb < 64 or self.max_output_bytes < 2:
            raise ValueError(f"invalid sandbox limits: {self} (need timeout_s > 0, cpu_time_s >= 1, memory_mb >= 64)")


@dataclass
class SandboxResult:
    """Outcome of one run.

    Attributes:
        stdout: decoded output (UTF-8, invalid bytes replaced), possibly cut in the middle.
        stderr: likewise (tracebacks of the code land here).
        exit_code: the process's exit status; negative = killed by that signal.
        status: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (wall or CPU limit).
        output_truncated: True if either stream exceeded ``max_output_bytes``.
        duration_s: wall seconds.
        network_isolation: ``netns`` | ``userns+netns`` | ``none`` (audit hook only).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    status: str
    output_truncated: bool
    duration_s: float
    network_isolation: str


class _Capture:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.half)]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        return (
            self.head.decode("utf-8", "replace")
            + f"\n...({dropped} bytes of output dropped)...\n"
            + self.tail.decode("utf-8", "replace")
        )


async def _drain(stream: asyncio.StreamReader, capture: _Capture) -> None:
    while chunk := await stream.read(65536):
        capture.feed(chunk)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Waits for the killed child and closes its pipes, so nothing is left for the loop's shutdown."""
    try:
        await asyncio.shield(asyncio.wait_for(proc.wait(), timeout=5.0))
    except (asyncio.CancelledError, asyncio.TimeoutError):
        pass  # cancelled again while reaping: the SIGKILL is already sent
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        # asyncio closes the pipe transports only after both reached EOF; a cancelled run may stop
        # reading first, and an unclosed transport warns (and raises) when the loop is gone
        transport.close()


def _env(workdir: str) -> dict[str, str]:
    # one BLAS thread: each extra thread reserves address space that RLIMIT_AS counts
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", **threads}


async def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Runs ``code`` as a script in a fresh sandboxed Python process.

    Args:
        code: Python source.
        limits: resource limits; default `SandboxLimits()`.

    Returns:
        A `SandboxResult`. Failures of the code (exceptions, limits, refused operations) are
        in the result, never raised.

    Raises:
        OSError: the child process could not be started at all.
        asyncio.CancelledError: the caller was cancelled (the process group is killed first).
    """
    limits = limits or SandboxLimits()
    workdir = tempfile.mkdtemp(prefix="verl-sandbox-")
    report_r, report_w = os.pipe()
    cfg = {
        "workdir": workdir,
        "cpu_time_s": limits.cpu_time_s,
        "memory_bytes": limits.memory_mb * 1024 * 1024,
        "max_file_bytes": limits.max_file_bytes,
        "isolate_network": limits.isolate_network,
        "report_fd": report_w,
    }
    start = time.monotonic()
    proc = None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-B", str(_CHILD), json.dumps(cfg),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=workdir, env=_env(workdir), start_new_session=True, pass_fds=(report_w,),
        )
        os.close(report_w)
        report_w = -1
        return await _supervise(proc, code, limits, start, report_r)
    finally:
        if proc is not None:
            _kill_group(proc.pid)  # also on cancellation, and any grandchild left behind
            await _reap(proc)
        for fd in (report_r, report_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


async def _supervise(proc: asyncio.subprocess.Process, code: str, limits: SandboxLimits, start: float, report_r: int) -> SandboxResult:
    out, err = _Capture(limits.max_output_bytes), _Capture(limits.max_output_bytes)
    readers = [asyncio.ensure_future(_drain(proc.stdout, out)), asyncio.ensure_future(_drain(proc.stderr, err))]
    timed_out = False
    try:
        try:
            proc.stdin.write(code.encode("utf-8", "replace"))
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died before reading all of it: its stderr says why
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(0.0, limits.timeout_s - (time.monotonic() - start)))
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(proc.pid)
            await proc.wait()
        _kill_group(proc.pid)  # a grandchild holding the pipes open would block the readers
        await asyncio.wait_for(asyncio.gather(*readers), timeout=2.0)
    finally:
        for r in readers:
            r.cancel()
    network = os.read(report_r, 64).decode() or "none"
    code_ = proc.returncode
    cpu_killed = code_ is not None and code_ in (-signal.SIGXCPU, -signal.SIGKILL) and not timed_out
    status = "timeout" if timed_out or cpu_killed else ("ok" if code_ == 0 else "error")
    stderr = err.text()
    if timed_out:
        stderr += f"\n[killed: wall-clock timeout of {limits.timeout_s:g} s]"
    elif cpu_killed:
        stderr += f"\n[killed: CPU time limit of {limits.cpu_time_s} s]"
    return SandboxResult(
        stdout=out.text(), stderr=stderr, exit_code=code_, status=status,
        output_truncated=out.truncated or err.truncated, duration_s=time.monotonic() - start,
        network_isolation=network,
    )
