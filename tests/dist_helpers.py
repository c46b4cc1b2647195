"""Spawning gloo ranks on one machine for multi-process tests (imported as ``from dist_helpers import ...``)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

ATTEMPTS = 3


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(fn: Callable[..., None], nprocs: int, *args: Any) -> None:
    """Runs ``fn(rank, port, *args)`` in ``nprocs`` spawned processes and waits for them.

    ``port`` is the rendezvous port (``MASTER_PORT``) for rank 0's store. Between probing a free
    port and rank 0 binding it another process can take it; that failure (``EADDRINUSE``) reruns
    all ranks on a new port, at most ``ATTEMPTS`` times. ``fn`` must be safe to rerun (it
    overwrites its outputs).

    Raises:
        torch.multiprocessing.ProcessRaisedException: A rank failed for another reason, or the
            port was taken on every attempt.
    """
    for attempt in range(ATTEMPTS):
        try:
            mp.start_processes(fn, args=(free_port(), *args), nprocs=nprocs, start_method="spawn")
            return
        except mp.ProcessRaisedException as e:
            if "EADDRINUSE" not in str(e) or attempt == ATTEMPTS - 1:
                raise
