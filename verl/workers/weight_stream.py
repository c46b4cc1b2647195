"""Bucketed streaming of the actor's weights to a rollout engine on its own worker group.

Used when ``actor_rollout_ref.hybrid_engine=false`` (see `verl.trainer.split_rollout`). The
actor's module may be plain, peft (LoRA) or FSDP2-sharded (``DTensor`` parameters). A stream is
a fixed list of tensor names (`stream_names`) walked in order; each `gather_bucket` call
materialises the next tensors one at a time (``DTensor.full_tensor()``: a collective every
actor rank enters in the same order, because every rank takes the same decisions from the
*global* sizes) until the bucket would exceed ``bucket_bytes``. Only the rank that hands the
bucket over keeps the full tensors; the others drop each one as soon as the gather returns. So an
actor rank never holds more than one bucket (or one tensor larger than a bucket) of unsharded
weights beyond its shard.

Names are the actor's own state-dict names. The receiving `RolloutWorker` builds its module with
the same factory from the same config, so the names match one to one (for vLLM they are
Hugging Face checkpoint names, which vLLM's ``load_weights`` maps onto its fused layers).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["gather_bucket", "load_bucket_in_place", "stream_names"]


def stream_names(module: nn.Module, trainable_only: bool) -> list[str]:
    """Names of the tensors one sync sends, in a fixed order.

    Args:
        module: the actor (plain, peft or FSDP2-sharded).
        trainable_only: only parameters with ``requires_grad`` (what an update changes: every
            weight of a full fine-tune, only the adapter under LoRA); otherwise every
            state-dict entry (parameters, tied aliases and buffers).
    """
    if trainable_only:
        return [name for name, p in module.named_parameters() if p.requires_grad]
    return list(module.state_dict(keep_vars=True).keys())


@torch.no_grad()
def gather_bucket(module: nn.Module, names: list[str], start: int, bucket_bytes: int,
                  keep: bool) -> tuple[list[tuple[str, torch.Tensor]], int]:
    """Gather the next bucket of full tensors, starting at ``names[start]``.

    A collective under FSDP2: every rank calls it with the same arguments (``keep`` aside).

    Args:
        module: the actor.
        names: `stream_names` of this sync.
        start: index of the first name of this bucket.
        bucket_bytes: bucket size in bytes (> 0); a single larger tensor forms its own bucket.
        keep: this rank hands the bucket over (the tensors are returned on the CPU); other ranks
            join the gathers and return an empty list.

    Returns:
        ``([(name, full tensor), ...], next start)``; ``next start == len(names)`` at the end.

    Raises:
        ValueError: ``bucket_bytes <= 0``.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    tensors = module.state_dict(keep_vars=True)
    bucket: list[tuple[str, torch.Tensor]] = []
    size, pos = 0, start
    while pos < len(names):
        tensor = tensors[names[pos]]
        nbytes = tensor.numel() * tensor.element_size()  # a DTensor reports its global size
        if pos > start and size + nbytes > bucket_bytes:
            break
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        if keep:
            bucket.append((names[pos], full.detach().to("cpu")))
        size += nbytes
        pos += 1
    return bucket, pos


@torch.no_grad()
def load_bucket_in_place(target: nn.Module, bucket: list[tuple[str, torch.Tensor]]) -> int:
    """Copy a bucket into ``target``'s tensors of the same names (dtype and device of ``target``).

    Returns:
        Number of tensors copied.

    Raises:
        KeyError: a name has no tensor in ``target``.
    """
    tensors = target.state_dict(keep_vars=True)
    for name, value in bucket:
        if name not in tensors:
            raise KeyError(f"rollout module has no tensor named {name!r}")
        tensors[name].data.copy_(value)
    return len(bucket)
