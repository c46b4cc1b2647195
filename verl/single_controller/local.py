"""`LocalWorkerGroup`: the worker object lives in the driver process (world size 1)."""

from __future__ import annotations

from typing import Any

from verl.single_controller.base import BaseWorkerGroup


class LocalWorkerGroup(BaseWorkerGroup):
    """A worker group of one in-process worker: zero overhead, breakpoints work.

    Args:
        worker_cls: a `Worker` subclass.
        *args, **kwargs: passed to ``worker_cls`` (constructed once, here).
    """

    def __init__(self, worker_cls: type, *args: Any, **kwargs: Any) -> None:
        super().__init__(worker_cls, world_size=1)
        self.workers = [worker_cls(*args, **kwargs)]

    def _execute(self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]) -> list[Any]:
        return [getattr(self.workers[r], name)(*per_args[i], **per_kwargs[i]) for i, r in enumerate(ranks)]
