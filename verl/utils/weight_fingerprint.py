"""Tensor fingerprints for the weight-sync attestation (`verl.workers.sync_attest`).

A fingerprint is ``SAMPLES`` elements of the flattened tensor at a fixed stride (the last one
always included), hashed (blake2b of their bytes, after a cast to a chosen dtype) and summed,
with the tensor's dtype and shape. Both sides of a sync compute it the same way: the rollout in
its own process (vLLM's worker included), the actor on its full tensors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "LORA_PREFIX",
    "SAMPLES",
    "Fingerprint",
    "adapter_fingerprints",
    "fingerprint",
    "fingerprint_named",
    "fingerprint_samples",
    "gather_samples",
    "sample_positions",
]

LORA_PREFIX = "lora:"
"""Name prefix of a LoRA adapter's tensors as a vLLM engine loads them (peft save naming after it)."""
SAMPLES = 64
"""Elements sampled per tensor (at a fixed stride; every element of smaller tensors)."""
_DTYPES = {
    str(d): d
    for d in (
        torch.float32,
        torch.float64,
        torch.bfloat16,
        torch.float16,
        torch.int64,
        torch.int32,
        torch.bool,
        torch.uint8,
        torch.int8,
    )
}


@dataclass(frozen=True)
class Fingerprint:
    """One tensor's fingerprint (see the module docstring).

    Attributes:
        dtype: dtype of the tensor as held (or received) by its side, e.g. ``"torch.float32"``.
        shape: its shape.
        digest: blake2b (16 hex digits) of the sampled elements' bytes, cast to ``digest_dtype``.
        digest_dtype: dtype the samples were hashed in.
        sample_sum: sum of the sampled elements (float64), for the error message.
    """

    dtype: str
    shape: tuple[int, ...]
    digest: str
    digest_dtype: str
    sample_sum: float

    def to_wire(self) -> list[Any]:
        """Plain values (msgpack / pickle safe: crosses vLLM's ``collective_rpc``)."""
        return [self.dtype, list(self.shape), self.digest, self.digest_dtype, self.sample_sum]

    @classmethod
    def from_wire(cls, wire: list[Any]) -> Fingerprint:
        """Inverse of `to_wire`."""
        dtype, shape, digest, digest_dtype, total = wire
        return cls(str(dtype), tuple(int(s) for s in shape), str(digest), str(digest_dtype), float(total))


def sample_positions(numel: int, samples: int = SAMPLES) -> torch.Tensor:
    """Flat indices `(min(numel, samples),)` at stride ``numel // samples``, the last element included."""
    if numel <= samples:
        return torch.arange(numel)
    pos = torch.arange(samples) * (numel // samples)
    pos[-1] = numel - 1
    return pos


def fingerprint(
    tensor: torch.Tensor, digest_dtype: torch.dtype | str | None = None, samples: int = SAMPLES
) -> Fingerprint:
    """`Fingerprint` of a full (unsharded) tensor; its samples are cast to ``digest_dtype`` (None = its own)."""
    flat = tensor.detach().reshape(-1)
    picked = flat[sample_positions(flat.numel(), samples).to(flat.device)]
    return fingerprint_samples(picked, tensor.dtype, tuple(tensor.shape), digest_dtype)


def fingerprint_samples(
    picked: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...], digest_dtype: torch.dtype | str | None = None
) -> Fingerprint:
    """`Fingerprint` from a tensor's `sample_positions` values `(S,)` (gathered elsewhere, e.g. from shards).

    Args:
        picked: the sampled elements, in position order.
        dtype / shape: the whole tensor's dtype and shape.
        digest_dtype: dtype the samples are hashed in (None = ``dtype``).
    """
    target = _DTYPES.get(digest_dtype, dtype) if isinstance(digest_dtype, str) else (digest_dtype or dtype)
    picked = picked.detach().to(target).cpu().contiguous()
    digest = hashlib.blake2b(picked.view(torch.uint8).numpy().tobytes(), digest_size=8).hexdigest()
    total = float(picked.double().sum()) if picked.numel() else 0.0
    return Fingerprint(str(dtype), tuple(shape), digest, str(target), total)


def fingerprint_named(items: Iterable[tuple[str, torch.Tensor]], samples: int = SAMPLES) -> dict[str, Fingerprint]:
    """``{name: fingerprint}`` of ``(name, full tensor)`` pairs, each hashed in its own dtype."""
    return {name: fingerprint(t, None, samples) for name, t in items}


def adapter_fingerprints(state: Mapping[str, torch.Tensor]) -> dict[str, Fingerprint]:
    """Fingerprints of a LoRA adapter's tensors (peft save naming), under ``lora:<name>``."""
    return {LORA_PREFIX + name: fingerprint(t) for name, t in state.items()}


def _row_sharded(tensor: Any) -> bool:
    """A ``DTensor`` sharded along dim 0 on a 1-D mesh (FSDP2's layout): sampled from local shards."""
    from torch.distributed.tensor import Shard

    placements = tuple(tensor.placements)
    return (
        tensor.device_mesh.ndim == 1
        and len(placements) == 1
        and isinstance(placements[0], Shard)
        and placements[0].dim == 0
        and tensor.ndim > 0
    )


def _local_samples(tensor: Any, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices into pos, values)`` of the sampled elements this rank's shard holds."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = tensor.to_local()
    _, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    row = max(1, tensor.numel() // max(1, tensor.shape[0]))
    rows = pos // row - int(offset[0])
    mine = ((rows >= 0) & (rows < local.shape[0])).nonzero().reshape(-1)
    values = local.detach().reshape(local.shape[0], row)[
        rows[mine].to(local.device), (pos[mine] % row).to(local.device)
    ]
    return mine, values.cpu()


def gather_samples(
    items: Iterable[tuple[str, torch.Tensor]], samples: int = SAMPLES
) -> list[tuple[str, torch.Tensor, torch.dtype, tuple[int, ...]]]:
    """``(name, sampled values (S,), dtype, shape)`` of every tensor, FSDP2 shards included.

    A row-sharded ``DTensor`` is sampled on its local shard and the pieces of every such tensor
    are exchanged in one ``all_gather_object`` over its mesh (a collective: every rank calls this
    with the same tensors in the same order), instead of one all-gather of each whole tensor;
    other ``DTensor`` layouts are gathered whole (``full_tensor()``).
    """
    out: list[Any] = []
    pieces: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    group = None
    for name, tensor in items:
        pos = sample_positions(tensor.numel(), samples)
        if (
            hasattr(tensor, "to_local")
            and _row_sharded(tensor)
            and (group is None or tensor.device_mesh.get_group() is group)
        ):
            group = tensor.device_mesh.get_group()
            pieces[len(out)] = _local_samples(tensor, pos)
            out.append([name, torch.empty(len(pos), dtype=tensor.dtype), tensor.dtype, tuple(tensor.shape)])
            continue
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        out.append([name, full.detach().reshape(-1)[pos.to(full.device)], tensor.dtype, tuple(tensor.shape)])
    if pieces:
        import torch.distributed as dist

        everyone: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, pieces, group=group)
        for rank_pieces in everyone:
            for i, (where, values) in rank_pieces.items():
                out[i][1][where] = values
    return [tuple(entry) for entry in out]  # type: ignore[misc]
