"""Worker base class, the ``@register`` decorator and the dispatch/collect functions.

A worker method declares how the controller's arguments are split across the group's ranks and
how the ranks' results are merged (HybridFlow, Sheng et al. 2024, §4):

- ``ONE_TO_ALL``: every rank gets the same arguments; the result is the list of rank results.
- ``RANK_ZERO``: only rank 0 runs; the result is its return value.
- ``DP_COMPUTE_PROTO``: the single `DataProto` argument is padded to a multiple of the
  data-parallel size, chunked (rank r gets chunk r), and the ranks' `DataProto` results are
  concatenated, the padding removed, and their ``meta_info["metrics"]`` merged.

Backends (`LocalWorkerGroup`, `RayWorkerGroup`) implement only ``_execute`` (run a method on a
list of ranks); everything else lives here, so both give the same numbers. Every call's wall
time is recorded per `call_key` (method and rows) in ``self.deadlines``
(`verl.single_controller.watchdog`), from which each backend derives the deadline after which a
call counts as hung.
"""

from __future__ import annotations

import enum
import functools
import os
import time
from typing import Any, Callable, Protocol, Sequence

from verl.protocol import DataProto
from verl.single_controller.watchdog import CallDeadlines, call_key

_DISPATCH_ATTR = "_verl_dispatch_mode"


class Dispatch(enum.Enum):
    """How a registered worker method's input is distributed and its outputs collected."""

    ONE_TO_ALL = "one_to_all"
    RANK_ZERO = "rank_zero"
    DP_COMPUTE_PROTO = "dp_compute_proto"


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL) -> Callable:
    """Mark a worker method as callable from the controller through a worker group.

    Args:
        dispatch_mode: how arguments are split across ranks and results merged.
    """

    def decorator(func: Callable) -> Callable:
        setattr(func, _DISPATCH_ATTR, dispatch_mode)
        return func

    return decorator


def registered_methods(worker_cls: type) -> dict[str, Dispatch]:
    """Names of `worker_cls`'s ``@register`` methods mapped to their dispatch modes."""
    out: dict[str, Dispatch] = {}
    for name in dir(worker_cls):
        mode = getattr(getattr(worker_cls, name, None), _DISPATCH_ATTR, None)
        if mode is not None:
            out[name] = mode
    return out


class Worker:
    """Base of every worker: knows its rank and world size, initialises torch.distributed.

    The rank environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) is set by the worker group before construction; with world size 1 no
    process group is created (local backend).
    """

    def __init__(self, device: str = "cpu") -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = resolve_device(device, self.local_rank)
        if self.world_size > 1:
            init_distributed(self.rank, self.world_size, self.device)

    @register(Dispatch.ONE_TO_ALL)
    def ping(self) -> int:
        """Liveness check; returns the rank."""
        return self.rank


def resolve_device(device: str, local_rank: int = 0) -> str:
    """The torch device of this worker: ``cpu``, or ``cuda:<i>`` for ``cuda``.

    Under Ray each worker sees only its own GPU (``CUDA_VISIBLE_DEVICES``), so index 0; a process
    that sees several GPUs uses its ``LOCAL_RANK``.

    Raises:
        RuntimeError: ``cuda`` requested but no CUDA device is available.
    """
    if device == "cpu":
        return "cpu"
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"trainer.device={device!r} but no CUDA device is available; use trainer.device=cpu")
    index = 0 if torch.cuda.device_count() == 1 else local_rank
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def init_distributed(rank: int, world_size: int, device: str = "cpu") -> None:
    """Create the default process group: gloo on CPU, nccl on CUDA."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "gloo" if device == "cpu" else "nccl"
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)


# ------------------------------------------------------------------------- dispatch / collect
def dispatch_args(mode: Dispatch, world_size: int, args: tuple, kwargs: dict) -> tuple[list[tuple], list[dict], Any]:
    """Split a call's arguments into per-rank arguments; returns (args per rank, kwargs per rank, state)."""
    if mode is Dispatch.DP_COMPUTE_PROTO:
        data, rest = _single_proto(args, kwargs)
        padded, pad_size = data.pad_to_divisor(world_size)
        chunks = padded.chunk(world_size)
        return [(c, *rest) for c in chunks], [dict(kwargs) for _ in chunks], pad_size
    if mode is Dispatch.RANK_ZERO:
        return [args], [kwargs], None
    return [args] * world_size, [kwargs] * world_size, None


def collect_results(mode: Dispatch, outputs: list[Any], state: Any) -> Any:
    """Merge per-rank results of a call dispatched with `mode` (see module docstring)."""
    if mode is Dispatch.DP_COMPUTE_PROTO:
        if all(o is None for o in outputs):
            return None
        merged = DataProto.concat(outputs)
        return merged.unpad(state) if state else merged
    if mode is Dispatch.RANK_ZERO:
        return outputs[0]
    return outputs


def _single_proto(args: tuple, kwargs: dict) -> tuple[DataProto, tuple]:
    if args and isinstance(args[0], DataProto):
        return args[0], tuple(args[1:])
    raise TypeError("a DP_COMPUTE_PROTO method takes a DataProto as its first positional argument")


class WorkerGroup(Protocol):
    """What the trainer sees of a group of workers of one class (local or Ray)."""

    world_size: int

    def __getattr__(self, name: str) -> Callable[..., Any]: ...


class BaseWorkerGroup:
    """Exposes each ``@register`` method of the worker class as a group method.

    Subclasses implement ``_execute(method_name, per_rank_args, per_rank_kwargs, ranks)`` and
    honour ``self.deadlines.deadline(method_name)``.

    Args:
        worker_cls: the `Worker` subclass.
        world_size: number of ranks.
        hang_timeout_s: ``trainer.hang_timeout_s`` (deadline floor; None = default, 0 = off).
    """

    def __init__(self, worker_cls: type, world_size: int, hang_timeout_s: float | None = None) -> None:
        self.worker_cls = worker_cls
        self.world_size = world_size
        self.deadlines = CallDeadlines(hang_timeout_s)
        self._methods = registered_methods(worker_cls)
        for name, mode in self._methods.items():
            setattr(self, name, functools.partial(self._call, name, mode))

    def _call(self, name: str, mode: Dispatch, *args: Any, **kwargs: Any) -> Any:
        per_args, per_kwargs, state = dispatch_args(mode, self.world_size, args, kwargs)
        ranks: Sequence[int] = [0] if mode is Dispatch.RANK_ZERO else range(self.world_size)
        start = time.monotonic()
        outputs = self._execute(name, per_args, per_kwargs, list(ranks))
        self.deadlines.record(call_key(name, per_args), time.monotonic() - start)
        return collect_results(mode, outputs, state)

    def call_by_reference(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Run the registered method ``name`` like a plain call, but leave each rank's result where it was made.

        Returns one handle per rank called (rank 0 only for ``RANK_ZERO``): on Ray an
        ``ObjectRef`` to the result in the object store, owned by that rank's process; in process
        the value itself. Passed as a positional argument of another group's method, a handle
        reaches that group's ranks without the controller ever holding the object (one copy less
        than fetching it and putting it back). Failures and hangs are reported as for a plain call.

        Raises:
            ValueError: a ``DP_COMPUTE_PROTO`` method (its results are merged by the controller).
        """
        mode = self._methods[name]
        if mode is Dispatch.DP_COMPUTE_PROTO:
            raise ValueError(
                f"call_by_reference({name!r}): a DP_COMPUTE_PROTO method's results are merged by the controller"
            )
        per_args, per_kwargs, _ = dispatch_args(mode, self.world_size, args, kwargs)
        ranks = [0] if mode is Dispatch.RANK_ZERO else list(range(self.world_size))
        start = time.monotonic()
        handles = self._execute_by_reference(name, per_args, per_kwargs, ranks)
        self.deadlines.record(call_key(name, per_args), time.monotonic() - start)
        return handles

    def _execute_by_reference(
        self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]
    ) -> list[Any]:
        """`_execute` returning handles (see `call_by_reference`); in process the values are their own handles."""
        return self._execute(name, per_args, per_kwargs, ranks)

    def _execute(self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]) -> list[Any]:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release the group's processes (nothing to do for in-process workers)."""
