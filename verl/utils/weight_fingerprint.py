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

__all__ = ["LORA_PREFIX", "SAMPLES", "Fingerprint", "adapter_fingerprints", "fingerprint", "fingerprint_named",
           "sample_positions"]

LORA_PREFIX = "lora:"
"""Name prefix of a LoRA adapter's tensors as a vLLM engine loads them (peft save naming after it)."""
SAMPLES = 64
"""Elements sampled per tensor (at a fixed stride; every element of smaller tensors)."""
_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                                torch.bool, torch.uint8, torch.int8)}


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


def fingerprint(tensor: torch.Tensor, digest_dtype: torch.dtype | str | None = None, samples: int = SAMPLES) -> Fingerprint:
    """`Fingerprint` of a full (unsharded) tensor; its samples are cast to ``digest_dtype`` (None = its own)."""
    flat = tensor.detach().reshape(-1)
    picked = flat[sample_positions(flat.numel(), samples).to(flat.device)]
    target = _DTYPES.get(digest_dtype, tensor.dtype) if isinstance(digest_dtype, str) else (digest_dtype or tensor.dtype)
    picked = picked.to(target).cpu().contiguous()
    digest = hashlib.blake2b(picked.view(torch.uint8).numpy().tobytes(), digest_size=8).hexdigest()
    total = float(picked.double().sum()) if picked.numel() else 0.0
    return Fingerprint(str(tensor.dtype), tuple(tensor.shape), digest, str(target), total)


def fingerprint_named(items: Iterable[tuple[str, torch.Tensor]], samples: int = SAMPLES) -> dict[str, Fingerprint]:
    """``{name: fingerprint}`` of ``(name, full tensor)`` pairs, each hashed in its own dtype."""
    return {name: fingerprint(t, None, samples) for name, t in items}


def adapter_fingerprints(state: Mapping[str, torch.Tensor]) -> dict[str, Fingerprint]:
    """Fingerprints of a LoRA adapter's tensors (peft save naming), under ``lora:<name>``."""
    return {LORA_PREFIX + name: fingerprint(t) for name, t in state.items()}
