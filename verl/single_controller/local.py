"""`LocalWorkerGroup`: the worker object lives in the driver process (world size 1).

Hang watchdog: a call that outlives its deadline (`verl.single_controller.watchdog`) cannot be
interrupted in its own thread, so a timer thread prints the role, method and deadline and every
thread's Python stack (`faulthandler`) to stderr and ends the process with status 3
(``os._exit``: checkpoints are published atomically, so the last one stays intact).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from typing import Any

from verl.single_controller.base import BaseWorkerGroup
from verl.single_controller.watchdog import call_key

HANG_EXIT_STATUS = 3


class LocalWorkerGroup(BaseWorkerGroup):
    """A worker group of one in-process worker: zero overhead, breakpoints work.

    Args:
        worker_cls: a `Worker` subclass.
        *args, **kwargs: passed to ``worker_cls`` (constructed once, here).
    """

    def __init__(self, worker_cls: type, *args: Any, **kwargs: Any) -> None:
        # off unless trainer.hang_timeout_s is set (the builder replaces `deadlines`): a user
        # sitting at a breakpoint in a worker method must not be killed
        super().__init__(worker_cls, world_size=1, hang_timeout_s=0)
        self.workers = [worker_cls(*args, **kwargs)]

    role = "local"

    def _execute(self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]) -> list[Any]:
        key = call_key(name, per_args)
        deadline = self.deadlines.deadline(key)
        timer = None
        if deadline is not None:
            timer = threading.Timer(deadline, self._on_hang, args=(name, deadline, self.deadlines.explain(key)))
            timer.daemon = True
            timer.start()
        try:
            return [getattr(self.workers[r], name)(*per_args[i], **per_kwargs[i]) for i, r in enumerate(ranks)]
        finally:
            if timer is not None:
                timer.cancel()

    def _on_hang(self, name: str, deadline: float, explain: str) -> None:
        print(
            f"verl hang watchdog: {self.role}.{name}() did not return within {deadline:.1f} s ({explain}); "
            f"stacks of every thread of the driver process:",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        print(
            f"verl train: hang: {self.role} rank 0 {name}() exceeded its {deadline:.1f} s deadline; stacks above; "
            f"the last checkpoint is intact",
            file=sys.stderr,
            flush=True,
        )
        os._exit(HANG_EXIT_STATUS)
