"""Data-parallel helpers of the training engine: rank, world size, sums and maxima over ranks.

Every function is the identity in one process (local backend, no process group), so the same
engine code runs unchanged on a laptop and under Ray/torchrun.

The reductions (sums, maxima, gathers) run over the whole world, or over the group of the
enclosing `reduce_over` block: under Ulysses sequence parallelism the ranks of one SP group hold
the same rows, so counts and metrics are reduced over the data-parallel group only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

_REDUCE: dict[str, Any] = {"group": None}


@contextlib.contextmanager
def reduce_over(group: Any) -> Iterator[None]:
    """Inside the block the reductions of this module run over ``group`` (None = the world)."""
    previous = _REDUCE["group"]
    _REDUCE["group"] = group
    try:
        yield
    finally:
        _REDUCE["group"] = previous


def _reducing() -> bool:
    return is_distributed() and dist.get_world_size(_REDUCE["group"]) > 1


def is_distributed() -> bool:
    """True when a ``torch.distributed`` process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def dp_world_size() -> int:
    """Number of data-parallel ranks (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def dp_rank() -> int:
    """This process's data-parallel rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


_LAYOUT = {"sp": 1}


def set_sequence_parallel_size(sp: int) -> None:
    """Record that this process's ranks split sequences in groups of ``sp`` (Ulysses): the data is
    sharded over ``world / sp`` data-parallel ranks (`data_parallel_size`, `data_parallel_rank`)."""
    _LAYOUT["sp"] = sp


def data_parallel_size() -> int:
    """Number of data shards: the world size divided by the sequence-parallel size."""
    return dp_world_size() // _LAYOUT["sp"]


def data_parallel_rank() -> int:
    """This process's data shard (the ranks of one sequence-parallel group share it)."""
    return dp_rank() // _LAYOUT["sp"]


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if is_distributed():
        dist.barrier()


def _comm_device() -> str:
    # gloo reduces CPU tensors; nccl needs them on this rank's GPU
    return "cpu" if dist.get_backend() == "gloo" else f"cuda:{torch.cuda.current_device()}"


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """Element-wise sum of ``value`` over ranks, returned on the CPU (a copy in one process)."""
    if _reducing():
        value = value.detach().to(_comm_device()).clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM, group=_REDUCE["group"])
    return value.detach().cpu()


def all_reduce_max(value: int) -> int:
    """Maximum of an integer over ranks."""
    if _reducing():
        t = torch.tensor([value], dtype=torch.int64, device=_comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_REDUCE["group"])
        return int(t.item())
    return value


def all_reduce_max_float(value: float) -> float:
    """Maximum of a float over ranks."""
    if _reducing():
        t = torch.tensor([value], dtype=torch.float64, device=_comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_REDUCE["group"])
        return float(t.item())
    return value


def all_gather_cat(value: torch.Tensor) -> torch.Tensor:
    """The 1-D tensors of every rank (lengths may differ), concatenated in rank order, on the CPU."""
    value = value.detach().cpu().flatten()
    if not _reducing():
        return value
    parts: list[torch.Tensor | None] = [None] * dist.get_world_size(_REDUCE["group"])
    dist.all_gather_object(parts, value, group=_REDUCE["group"])
    return torch.cat([p for p in parts if p is not None])


def sum_floats(values: dict[str, float]) -> dict[str, float]:
    """Sum each float of a per-rank dict over ranks in one collective (keys equal on all ranks)."""
    keys = sorted(values)
    total = all_reduce_sum(torch.tensor([float(values[k]) for k in keys], dtype=torch.float64))
    return {k: float(v) for k, v in zip(keys, total.tolist())}
