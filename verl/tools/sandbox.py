"""Running untrusted Python code from a model, isolated by the operating system.

Each run is one fresh process that runs one snippet and is then discarded (never reused: state
would leak between snippets). The boundary is **bubblewrap** (`verl.tools.isolation`): new user,
mount, PID, IPC, UTS and network namespaces, a read-only interpreter, a private ``/tmp`` tmpfs
as the only writable path and working directory, its own ``/proc``, ``/dev/null`` and
``/dev/urandom`` only, an allow-listed environment. Limits are enforced from outside the
sandboxed process:

* **rlimits** set by ``prlimit`` before ``bwrap`` starts: CPU seconds (``RLIMIT_CPU``: SIGXCPU),
  address space (``RLIMIT_AS``: MemoryError), largest written file (``RLIMIT_FSIZE``), open files,
  no core dumps; the process count by a pids cgroup where one can be made (and ``RLIMIT_NPROC``);
* a **wall-clock timeout** (also the caller's cancellation) that SIGKILLs the outer ``bwrap``: its
  ``--die-with-parent`` child is PID 1 of the sandbox's PID namespace, so the kernel kills every
  process in it, however it forked or ``setsid``-ed;
* **bounded output**: stdout and stderr are read as they come, keeping at most
  ``max_output_bytes`` of each (head and tail), so a flood costs the parent no memory.

A Python audit hook inside (`verl.tools._sandbox_child`) stays as defence in depth and gives the
model readable refusals; it is not a boundary.

**Warm pool.** A cold start (cgroup, ``prlimit``, ``bwrap``, Python) costs more than 50 ms of wall
time (p50 56 ms, p99 184 ms on the shared 2-core CPU; ``benchmarks/bench_sandbox.py``), so
`SandboxPool` keeps ``warm`` workers started ahead (p50 13 ms): each is an isolated interpreter
blocked on reading its snippet from stdin; a run takes one, and a replacement is started in the
background. All sandbox processes are started by one long-lived thread: ``--die-with-parent``
fires when the *thread* that started ``bwrap`` exits.

Without bubblewrap, `SandboxPool` raises `IsolationError` (one line naming the package) unless
``unsafe_no_isolation=True``: then the code runs in a plain child process (own session, rlimits
set by the child itself, a network namespace when the kernel allows, the audit hook) — not safe
against hostile code, and logged loudly once.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verl.tools.isolation import (
    IsolationError,
    IsolationInfo,
    PidsCgroup,
    check_isolation,
    sandbox_command,
    sandbox_env,
)

__all__ = ["IsolationError", "SandboxLimits", "SandboxPool", "SandboxResult", "run_python"]

logger = logging.getLogger(__name__)
_BOOTSTRAP = Path(__file__).with_name("_sandbox_child.py").read_text()
_SANDBOX_WORKDIR = "/tmp"  # the private tmpfs inside bubblewrap


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run.

    Attributes:
        timeout_s: wall-clock seconds from handing over the code until the sandbox is killed.
        cpu_time_s: CPU seconds (``RLIMIT_CPU``), whole seconds ≥ 1.
        memory_mb: address space in MiB (``RLIMIT_AS``); the interpreter itself needs ~30.
        max_output_bytes: bytes kept per stream (half from the start, half from the end).
        max_file_bytes: largest file the code may write (``RLIMIT_FSIZE``).
        tmpfs_mb: size of the private writable ``/tmp`` in MiB (all files together).
        max_processes: processes and threads at once (pids cgroup, ``RLIMIT_NPROC``), ≥ 4.
        max_open_files: ``RLIMIT_NOFILE``, ≥ 16.
        isolate_network: without bubblewrap only: try a network namespace (bubblewrap always has one).
        audit_hook: install the Python-level refusals (defence in depth, not a boundary).
    """

    timeout_s: float = 10.0
    cpu_time_s: int = 5
    memory_mb: int = 512
    max_output_bytes: int = 64 * 1024
    max_file_bytes: int = 16 * 1024 * 1024
    tmpfs_mb: int = 64
    max_processes: int = 64
    max_open_files: int = 256
    isolate_network: bool = True
    audit_hook: bool = True

    def __post_init__(self) -> None:
        if (
            self.timeout_s <= 0
            or self.cpu_time_s < 1
            or self.memory_mb < 64
            or self.max_output_bytes < 2
            or self.tmpfs_mb < 1
            or self.max_processes < 4
            or self.max_open_files < 16
        ):
            raise ValueError(
                f"invalid sandbox limits: {self} (need timeout_s > 0, cpu_time_s >= 1, memory_mb >= 64, "
                "tmpfs_mb >= 1, max_processes >= 4, max_open_files >= 16)"
            )

    def rlimits(self) -> dict[str, int]:
        """The rlimit values `verl.tools.isolation.sandbox_command` and the bootstrap take."""
        return {
            "memory_bytes": self.memory_mb * 1024 * 1024,
            "cpu_time_s": self.cpu_time_s,
            "max_file_bytes": self.max_file_bytes,
            "max_open_files": self.max_open_files,
        }


@dataclass
class SandboxResult:
    """Outcome of one run.

    Attributes:
        stdout: decoded output (UTF-8, invalid bytes replaced), possibly cut in the middle.
        stderr: likewise (tracebacks of the code land here).
        exit_code: the code's exit status; negative = killed by that signal.
        status: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (wall or CPU limit).
        output_truncated: True if either stream exceeded ``max_output_bytes``.
        duration_s: wall seconds from taking a worker to the result.
        isolation: ``bubblewrap`` | ``none`` (``unsafe_no_isolation``).
    """

    stdout: str
    stderr: str
    exit_code: int | None
    status: str
    output_truncated: bool
    duration_s: float
    isolation: str


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


class _Spawner:
    """The one daemon thread that starts (and reaps) every sandbox process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="verl-sandbox-spawner", daemon=True).start()

    def submit(self, fn: Callable[[], object]) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut

    def _loop(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                fut.set_exception(e)


_SPAWNER: _Spawner | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> _Spawner:
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = _Spawner()
        return _SPAWNER


@dataclass
class _Worker:
    """One started sandbox, waiting for its snippet on stdin."""

    proc: subprocess.Popen
    cgroup: PidsCgroup | None
    workdir: str | None  # the host temporary directory without bubblewrap

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # prlimit/bwrap (or the plain child) and its group
        except (ProcessLookupError, PermissionError):
            pass  # already gone
        if self.cgroup is not None:
            self.cgroup.kill()

    def dispose(self) -> None:
        """Kill, reap, close the pipes and remove the cgroup and folder (blocking: spawner thread)."""
        self.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("sandbox process %d did not exit after SIGKILL", self.proc.pid)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


_POOLS: set = set()  # pools with warm workers, closed at exit (until then they keep their workers)
_UNSAFE_LOGGED = False
_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        logger.warning(msg)


def _warn_unsafe_once() -> None:
    global _UNSAFE_LOGGED
    if not _UNSAFE_LOGGED:
        _UNSAFE_LOGGED = True
        logger.warning(
            "UNSAFE: unsafe_no_isolation=true: model code runs WITHOUT OS isolation (no bubblewrap): "
            "it can read this machine's files and other processes' environment"
        )


class SandboxPool:
    """Starts isolated one-shot Python workers, ``warm`` of them ahead of need.

    Usable from any thread and any event loop (asyncio.run per rollout step is fine): workers
    are plain processes whose pipes are attached to the loop of the run that takes them. No
    process starts before `start` or the first `run`.

    Args:
        limits: the limits of every run of this pool.
        warm: workers kept started and waiting (0 = start one per run: cold).
        unsafe_no_isolation: run without bubblewrap (see the module docstring); logged once.

    Raises:
        IsolationError: bubblewrap is missing or cannot create a sandbox here (one line naming
            the package), unless ``unsafe_no_isolation``.
    """

    def __init__(self, limits: SandboxLimits | None = None, warm: int = 0, unsafe_no_isolation: bool = False) -> None:
        if warm < 0:
            raise ValueError(f"warm must be >= 0, got {warm}")
        self.limits = limits or SandboxLimits()
        self.warm = warm
        self.info: IsolationInfo | None = None
        if unsafe_no_isolation:
            _warn_unsafe_once()
        else:
            self.info = check_isolation()
            if not self.info.process_cap:
                _warn_once("no process cap: " + self.info.describe())
        self.isolation = "bubblewrap" if self.info else "none"
        self._ready: collections.deque[_Worker] = collections.deque()
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = False
        if warm:
            _POOLS.add(self)

    def start(self) -> None:
        """Starts the ``warm`` workers in the background (also done by every `run`); idempotent."""
        self._refill()

    def _start(self) -> _Worker:
        limits = self.limits
        cfg = {"max_processes": limits.max_processes, "audit_hook": limits.audit_hook}
        if self.info is None:
            workdir = tempfile.mkdtemp(prefix="verl-sandbox-")
            cfg.update(limits.rlimits(), workdir=workdir, set_limits=True, isolate_network=limits.isolate_network)
            argv = [sys.executable, "-I", "-B", "-c", _BOOTSTRAP, json.dumps(cfg)]
            env = sandbox_env({"HOME": workdir, "TMPDIR": workdir})
            cgroup = None
        else:
            workdir = None
            cfg["workdir"] = _SANDBOX_WORKDIR
            cgroup = PidsCgroup(self.info.pids_cgroup, limits.max_processes) if self.info.pids_cgroup else None
            python = [sys.executable, "-I", "-B", "-c", _BOOTSTRAP, json.dumps(cfg)]
            argv = sandbox_command(self.info, python, limits.rlimits(), limits.tmpfs_mb * 1024 * 1024, cgroup)
            env = {"PATH": "/usr/bin:/bin"}  # for prlimit / bwrap themselves; the sandbox's is set by --setenv
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir or "/",
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        return _Worker(proc, cgroup, workdir)

    def _refill(self) -> None:
        with self._lock:
            missing = 0 if self._closed else self.warm - len(self._ready) - self._pending
            self._pending += max(0, missing)
        for _ in range(max(0, missing)):
            _spawner().submit(self._start).add_done_callback(self._started)

    def _started(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending -= 1
            if fut.exception() is None:
                if self._closed:
                    _spawner().submit(fut.result().dispose)
                else:
                    self._ready.append(fut.result())
                return
        logger.warning("could not start a warm sandbox worker: %s", fut.exception())

    async def _take(self) -> _Worker:
        with self._lock:
            worker = self._ready.popleft() if self._ready else None
        self._refill()
        if worker is not None and worker.proc.poll() is None:
            return worker
        if worker is not None:  # died while waiting (e.g. killed from outside): start a fresh one
            _spawner().submit(worker.dispose)
        return await asyncio.wrap_future(_spawner().submit(self._start))

    async def run(self, code: str) -> SandboxResult:
        """Runs ``code`` as a script in a fresh isolated worker, then discards the worker.

        Args:
            code: Python source.

        Returns:
            A `SandboxResult`. Failures of the code (exceptions, limits, refused operations) are
            in the result, never raised.

        Raises:
            OSError: no sandbox process could be started at all.
            asyncio.CancelledError: the caller was cancelled (the sandbox is killed first).
        """
        start = time.monotonic()
        worker = await self._take()
        try:
            return await _supervise(worker, code, self.limits, start, self.isolation)
        finally:
            worker.kill()  # also on cancellation; with bubblewrap the whole PID namespace goes
            _spawner().submit(worker.dispose)

    def close(self, wait: bool = False) -> None:
        """Kills the waiting workers; later runs start cold ones.

        Args:
            wait: reap them and remove their cgroups here, not in the background (at exit).
        """
        with self._lock:
            self._closed = True
        _POOLS.discard(self)
        deadline = time.monotonic() + 10.0
        while wait and self._pending and time.monotonic() < deadline:
            time.sleep(0.01)  # workers being started: once started they are disposed of (closed pool)
        with self._lock:
            ready, self._ready = list(self._ready), collections.deque()
        for w in ready:
            w.kill()
            if wait:
                w.dispose()
            else:
                _spawner().submit(w.dispose)
        if wait:  # the spawner runs its jobs in order: this one returns once the disposals before it are done
            try:
                _spawner().submit(lambda: None).result(timeout=10.0)
            except concurrent.futures.TimeoutError:
                logger.warning("sandbox workers were still being disposed of after 10 s")


def _after_fork_in_child() -> None:
    # a forked child has no spawner thread and does not own the parent's workers: start afresh
    global _SPAWNER, _SPAWNER_LOCK
    _SPAWNER, _SPAWNER_LOCK = None, threading.Lock()
    for pool in list(_POOLS):
        pool._ready, pool._pending, pool._lock = collections.deque(), 0, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_pools() -> None:
    # inline: the spawner is a daemon thread, its queue is not drained at exit
    for pool in list(_POOLS):
        pool.close(wait=True)


async def run_python(
    code: str, limits: SandboxLimits | None = None, unsafe_no_isolation: bool = False
) -> SandboxResult:
    """Runs ``code`` in one cold isolated worker (`SandboxPool` with ``warm=0``).

    Args:
        code: Python source.
        limits: resource limits; default `SandboxLimits()`.
        unsafe_no_isolation: run without bubblewrap (not safe; logged once).

    Returns:
        A `SandboxResult` (see `SandboxPool.run`).

    Raises:
        IsolationError: no bubblewrap here and not ``unsafe_no_isolation``.
        OSError: the process could not be started at all.
        asyncio.CancelledError: the caller was cancelled (the sandbox is killed first).
    """
    return await SandboxPool(limits, warm=0, unsafe_no_isolation=unsafe_no_isolation).run(code)


def _attach_reader(loop: asyncio.AbstractEventLoop, fd: int, capture: _Capture) -> asyncio.Future:
    """Feeds ``fd`` into ``capture`` from the loop; the future is done at EOF."""
    done = loop.create_future()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            capture.feed(chunk)
            return
        loop.remove_reader(fd)
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    done.add_done_callback(lambda _: loop.remove_reader(fd))  # also when cancelled
    return done


async def _write_all(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
    """Writes ``data`` to the non-blocking pipe ``fd`` as the reader drains it."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_writer(fd, lambda fut=ready: fut.done() or fut.set_result(None))
            try:
                await ready
            finally:
                loop.remove_writer(fd)


def _exit_status(returncode: int | None, isolated: bool) -> int | None:
    # bwrap reports a child killed by signal N as exit status 128 + N: map it back to -N
    if isolated and returncode is not None and 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode


async def _supervise(worker: _Worker, code: str, limits: SandboxLimits, start: float, isolation: str) -> SandboxResult:
    loop = asyncio.get_running_loop()
    proc = worker.proc
    out, err = _Capture(limits.max_output_bytes), _Capture(limits.max_output_bytes)
    readers = [_attach_reader(loop, proc.stdout.fileno(), out), _attach_reader(loop, proc.stderr.fileno(), err)]
    pidfd = os.pidfd_open(proc.pid)
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    timed_out = False
    handed_over = time.monotonic()  # the wall clock counts from here, not from a cold start
    try:
        try:
            await _write_all(loop, proc.stdin.fileno(), code.encode("utf-8", "replace"))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died before reading all of it: its stderr says why
        proc.stdin.close()
        try:
            await asyncio.wait_for(
                asyncio.shield(exited), timeout=max(0.0, limits.timeout_s - (time.monotonic() - handed_over))
            )
        except asyncio.TimeoutError:
            timed_out = True
        worker.kill()  # the timeout; else leftovers of the PID namespace / cgroup holding the pipes open
        await asyncio.wait_for(asyncio.shield(exited), timeout=10.0)
        await asyncio.wait_for(asyncio.gather(*readers), timeout=2.0)
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        for r in readers:
            r.cancel()
    code_ = _exit_status(proc.poll(), isolation == "bubblewrap")
    if timed_out:
        code_ = -signal.SIGKILL
    cpu_killed = code_ is not None and code_ in (-signal.SIGXCPU, -signal.SIGKILL) and not timed_out
    status = "timeout" if timed_out or cpu_killed else ("ok" if code_ == 0 else "error")
    stderr = err.text()
    if timed_out:
        stderr += f"\n[killed: wall-clock timeout of {limits.timeout_s:g} s]"
    elif code_ == -signal.SIGXCPU:
        stderr += f"\n[killed: CPU time limit of {limits.cpu_time_s} s]"
    elif cpu_killed:  # the hard CPU limit one second later, or a kill the code sent itself
        stderr += f"\n[killed by SIGKILL: CPU time limit of {limits.cpu_time_s} s, or the code's own kill]"
    return SandboxResult(
        stdout=out.text(),
        stderr=stderr,
        exit_code=code_,
        status=status,
        output_truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - start,
        isolation=isolation,
    )
