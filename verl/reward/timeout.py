"""Running untrusted scorer code with a deadline, without ever stopping training.

Decision: scorers run in ONE persistent daemon worker thread per :class:`TimeoutCaller`, fed
through a queue; the caller waits for each result with a timeout. A process pool was rejected:
it must pickle the scorer (user files loaded by path are not importable in spawned children),
adds milliseconds per call, and would force math-verify and friends to re-import per worker.

What happens on a timeout: the worker thread cannot be killed in Python, so it is ABANDONED.
It is a daemon thread, so it never blocks interpreter exit, and its eventual result is dropped
(it writes to a queue nobody reads any more); a fresh worker serves the next call. A scorer
stuck in a CPU-bound loop keeps competing for the GIL until it returns, which is why scorers
should bound their own work (math-verify here runs without its signal-based timeout, since
signals only work on the main thread).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

_STOP = None


@dataclass(frozen=True)
class CallOutcome:
    """Result of one guarded call.

    Attributes:
        status: ``"ok"``, ``"error"`` (the function raised) or ``"timeout"``.
        value: The return value when ``status == "ok"``, else None.
        error: ``repr`` of the exception, or a timeout description; empty when ok.
        skipped: A timeout for a call never made (`TimeoutCaller.call_many` after
            ``stop_after_timeouts`` timeouts in a row).
    """

    status: Literal["ok", "error", "timeout"]
    value: Any = None
    error: str = ""
    skipped: bool = False


def _worker_loop(inbox: queue.SimpleQueue, outbox: queue.SimpleQueue) -> None:
    """Runs queued calls until it receives the stop sentinel."""
    while True:
        item = inbox.get()
        if item is _STOP:
            return
        fn, kwargs = item
        try:
            outbox.put(CallOutcome("ok", fn(**kwargs)))
        except BaseException as exc:  # noqa: BLE001 - a scorer calling sys.exit must not kill us either
            outbox.put(CallOutcome("error", error=repr(exc)))


class TimeoutCaller:
    """Calls functions with keyword arguments under a per-call deadline.

    Args:
        timeout_s: Seconds each call may take. None or <= 0 runs calls inline in the calling
            thread (errors are still contained, but a hung call hangs the caller).
    """

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s if timeout_s is not None and timeout_s > 0 else None
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue | None = None
        self._outbox: queue.SimpleQueue | None = None

    def _start_worker(self) -> None:
        self._inbox, self._outbox = queue.SimpleQueue(), queue.SimpleQueue()
        thread = threading.Thread(
            target=_worker_loop, args=(self._inbox, self._outbox), name="verl-reward-scorer", daemon=True
        )
        thread.start()
        # Stop the idle worker when this caller is garbage collected.
        weakref.finalize(self, self._inbox.put, _STOP)

    def __call__(self, fn: Callable[..., Any], **kwargs: Any) -> CallOutcome:
        """Runs ``fn(**kwargs)``; never raises for errors inside ``fn``.

        Args:
            fn: The function to call (e.g. a scorer).
            **kwargs: Its keyword arguments.

        Returns:
            The :class:`CallOutcome`.
        """
        if self.timeout_s is None:
            try:
                return CallOutcome("ok", fn(**kwargs))
            except Exception as exc:  # a broken scorer gives reward 0, it never stops training
                return CallOutcome("error", error=repr(exc))
        with self._lock:
            if self._inbox is None:
                self._start_worker()
            assert self._inbox is not None and self._outbox is not None
            self._inbox.put((fn, kwargs))
            try:
                return self._outbox.get(timeout=self.timeout_s)
            except queue.Empty:
                # Abandon the busy worker: it stops after its call returns (if ever).
                self._inbox.put(_STOP)
                self._inbox = self._outbox = None
                return CallOutcome("timeout", error=f"no result within {self.timeout_s} s")

    def call_many(
        self, fn: Callable[..., Any], kwargs_list: list[dict[str, Any]], stop_after_timeouts: int | None = None
    ) -> list[CallOutcome]:
        """``fn(**kw)`` for each ``kw`` in order, each under its own ``timeout_s`` deadline; one outcome each.

        The calls run one after another in one fresh daemon thread per batch, and the caller
        sleeps until the batch is done or the call in progress passes its deadline: one thread
        handoff per batch instead of one per call (a queue round trip is ~70 µs per call, 30x a
        rule scorer's own time). Per call the result is what `__call__` gives: ``ok``, ``error``
        (it raised) or ``timeout`` (the call in progress ran past ``timeout_s`` from its own start;
        its thread is abandoned and the next call starts in a new one).

        Args:
            fn: The function (e.g. a scorer).
            kwargs_list: Its keyword arguments, one dict per call.
            stop_after_timeouts: After this many timeouts in a row, the remaining calls are not
                made and count as timeouts with ``skipped=True`` (a hung scorer); None = never.

        Returns:
            One `CallOutcome` per call, in order.
        """
        if self.timeout_s is None:
            return [self(fn, **kw) for kw in kwargs_list]
        outcomes: list[CallOutcome] = []
        while len(outcomes) < len(kwargs_list):
            if (
                stop_after_timeouts
                and len(outcomes) >= stop_after_timeouts
                and all(o.status == "timeout" for o in outcomes[-stop_after_timeouts:])
            ):
                skipped = CallOutcome("timeout", error="skipped: the scorer kept timing out", skipped=True)
                outcomes += [skipped] * (len(kwargs_list) - len(outcomes))
                break
            outcomes += self._run_until_timeout(fn, kwargs_list[len(outcomes) :])
        return outcomes

    def _run_until_timeout(self, fn: Callable[..., Any], kwargs_list: list[dict[str, Any]]) -> list[CallOutcome]:
        """Outcomes of the calls in one thread, up to and including the first that times out."""
        state = _Batch(time.monotonic())

        def work() -> None:
            for kw in kwargs_list:
                try:
                    outcome = CallOutcome("ok", fn(**kw))
                except BaseException as exc:  # noqa: BLE001 - a scorer calling sys.exit must not kill us either
                    outcome = CallOutcome("error", error=repr(exc))
                with state.lock:
                    if state.cancelled:  # the caller declared this call timed out
                        return
                    state.results.append(outcome)
                    state.started = time.monotonic()
                    if len(state.results) == len(kwargs_list):
                        state.done.set()  # under the lock: the caller never sees all results without it

        threading.Thread(target=work, name="verl-reward-batch", daemon=True).start()
        assert self.timeout_s is not None
        while not state.done.wait(timeout=max(0.0, state.started + self.timeout_s - time.monotonic())):
            with state.lock:
                if state.done.is_set():
                    break
                if time.monotonic() >= state.started + self.timeout_s:
                    state.cancelled = True
                    return state.results + [CallOutcome("timeout", error=f"no result within {self.timeout_s} s")]
        return state.results


class _Batch:
    """Progress of one `TimeoutCaller.call_many` thread: results so far, when the current call started."""

    def __init__(self, started: float) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.results: list[CallOutcome] = []
        self.started = started
        self.cancelled = False
