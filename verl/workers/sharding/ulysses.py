"""The ranks of a worker group laid out as data parallel × Ulysses sequence parallel.

``world = dp · sp`` ranks form a `DeviceMesh` with dims ``("dp", "sp")``; rank ``r`` is data-parallel
rank ``r // sp`` and SP rank ``r % sp`` (consecutive ranks share sequences, as verl's
``ulysses_device_mesh``). The parameters stay FSDP2-sharded over all ``world`` ranks (verl's default,
``fsdp_size=-1``); the ``sp`` dim only splits sequences.

The controller still hands every rank its own chunk of a batch (``DP_COMPUTE_PROTO`` over the
world). Inside a worker method `UlyssesLayout.scope` all-gathers the chunks of the SP group, so
each of its ranks holds the same ``sp`` chunks (the data-parallel rank's rows), runs the method
with the model's packed forwards split along the sequence (`verl.modules.ulysses`) and the
engine's counts and metrics reduced over the ``dp`` dim (`verl.engine.dist.reduce_over`), and
`UlyssesLayout.local` hands back the rows of this rank's own chunk.

Why the gradient is right: every rank of an SP group computes the same loss from the gathered
`(B, R)` outputs and back-propagates through its own columns only; the SP ranks' gradients add
up to the data-parallel rank's gradient, FSDP2 averages over all ``world`` ranks and the engine
scales the loss by ``world`` — the same sum as without SP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verl.protocol import DataProto

__all__ = ["UlyssesLayout", "data_parallel_size"]


def data_parallel_size(world_size: int, sp: int, what: str = "ulysses_sequence_parallel_size") -> int:
    """``world_size / sp``.

    Raises:
        ConfigError: ``sp`` < 1 or not a divisor of ``world_size``.
    """
    from verl.config.errors import ConfigError

    if sp < 1 or world_size % sp:
        raise ConfigError(f"{what}={sp} must divide the number of ranks of its worker group ({world_size})")
    return world_size // sp


@dataclass
class UlyssesLayout:
    """This rank's place in the ``(dp, sp)`` mesh and the groups of both dims.

    Attributes:
        sp: SP degree (1: the layout is the identity and builds no mesh).
        dp: data-parallel size, ``world / sp``.
        mesh: the `DeviceMesh` ``("dp", "sp")``, None when ``sp == 1``.
    """

    sp: int
    dp: int
    mesh: Any = None

    @classmethod
    def build(cls, sp: int, world_size: int, device: str = "cpu") -> UlyssesLayout:
        """The layout of ``world_size`` ranks at SP degree ``sp`` (a collective when ``sp > 1``).

        Raises:
            ConfigError: ``sp`` does not divide ``world_size`` (`data_parallel_size`).
        """
        from verl.engine.dist import set_sequence_parallel_size

        dp = data_parallel_size(world_size, sp)
        set_sequence_parallel_size(sp)
        if sp == 1:
            return cls(sp=1, dp=dp)
        from torch.distributed.device_mesh import init_device_mesh

        device_type = "cpu" if device == "cpu" else "cuda"
        return cls(sp=sp, dp=dp, mesh=init_device_mesh(device_type, (dp, sp), mesh_dim_names=("dp", "sp")))

    @property
    def sp_group(self) -> Any:
        return self.mesh["sp"].get_group() if self.mesh is not None else None

    @property
    def dp_group(self) -> Any:
        return self.mesh["dp"].get_group() if self.mesh is not None else None

    def prepare(self, module: Any) -> None:
        """Switch ``module``'s attention to the Ulysses function (no-op at ``sp == 1``).

        Raises:
            ConfigError: heads or KV heads not divisible by ``sp`` (`verl.modules.ulysses.check_heads`).
        """
        if self.sp > 1:
            from verl.modules.ulysses import enable_ulysses

            enable_ulysses(module, self.sp)

    def prepare_reference(self, module: Any) -> None:
        """The reference policy's `prepare` (the same switch; `TensorParallelLayout` keeps it unsplit)."""
        self.prepare(module)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Packed forwards split over the SP group and reductions over the ``dp`` dim inside the block."""
        if self.sp == 1:
            yield
            return
        from verl.engine.dist import reduce_over
        from verl.modules.ulysses import sequence_parallel

        with reduce_over(self.dp_group), sequence_parallel(self.sp_group):
            yield

    def gather(self, data: DataProto) -> DataProto:
        """The SP group's chunks of ``data`` concatenated in rank order (this rank's ``meta_info``)."""
        if self.sp == 1:
            return data
        import torch.distributed as dist

        parts: list[DataProto | None] = [None] * self.sp
        dist.all_gather_object(parts, data, group=self.sp_group)
        merged = DataProto.concat([p for p in parts if p is not None])
        merged.meta_info = data.meta_info
        return merged

    def local(self, out: DataProto) -> DataProto:
        """This rank's rows of a result computed on the gathered rows (`gather`), in order."""
        if self.sp == 1 or out.batch is None:
            return out
        import torch.distributed as dist

        return out.chunk(self.sp)[dist.get_rank(self.sp_group)]

    def run(self, data: DataProto, method: Any, *args: Any) -> DataProto:
        """``local(method(gather(data), *args))`` inside `scope`."""
        with self.scope():
            return self.local(method(self.gather(data), *args))
