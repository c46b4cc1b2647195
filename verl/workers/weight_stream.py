"""Bucketed streaming of the actor's weights to a rollout engine on its own worker group.

Used when ``actor_rollout_ref.hybrid_engine=false`` (see `verl.trainer.ppo.split_rollout`). The
actor's module may be plain, peft (LoRA) or FSDP2-sharded (``DTensor`` parameters). A stream is
a fixed list of tensor names (`stream_names`) cut into buckets up front (`plan_buckets`, from
the *global* sizes, so every rank cuts the same way and the controller knows the bucket count
before the first gather); each `gather_bucket` call materialises one bucket's tensors one at a
time (``DTensor.full_tensor()``: a collective every actor rank enters in the same order). Only the rank that hands the
bucket over keeps the full tensors; the others drop each one as soon as the gather returns. So an
actor rank never holds more than one bucket (or one tensor larger than a bucket) of unsharded
weights beyond its shard.

Names are the actor's own state-dict names. The receiving `RolloutWorker` builds its module with
the same factory from the same config, so the names match one to one (for vLLM they are
Hugging Face checkpoint names, which vLLM's ``load_weights`` maps onto its fused layers).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["full_tensor", "gather_bucket", "load_bucket_in_place", "plan_buckets", "stream_names"]


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a ``DTensor`` (FSDP2) is all-gathered (a collective), a plain one returned as is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


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


def plan_buckets(module: nn.Module, names: list[str], bucket_bytes: int) -> list[tuple[int, int]]:
    """Cut ``names`` into consecutive buckets of at most ``bucket_bytes`` (by global tensor size).

    Args:
        module: the actor (a ``DTensor`` reports its global, unsharded size).
        names: `stream_names` of this sync.
        bucket_bytes: bucket size in bytes (> 0); a single larger tensor forms its own bucket.

    Returns:
        ``[(start, stop), ...]`` index ranges into ``names``, in order, covering every name once.

    Raises:
        ValueError: ``bucket_bytes <= 0``.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    tensors = module.state_dict(keep_vars=True)
    plan: list[tuple[int, int]] = []
    start, size = 0, 0
    for pos, name in enumerate(names):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if pos > start and size + nbytes > bucket_bytes:
            plan.append((start, pos))
            start, size = pos, 0
        size += nbytes
    if names:
        plan.append((start, len(names)))
    return plan


@torch.no_grad()
def gather_bucket(module: nn.Module, names: list[str], start: int, stop: int, keep: bool) -> list[tuple[str, torch.Tensor]]:
    """Gather the full tensors ``names[start:stop]`` (one bucket of `plan_buckets`).

    A collective under FSDP2: every rank calls it with the same arguments (``keep`` aside).

    Args:
        module: the actor.
        names: `stream_names` of this sync.
        start, stop: the bucket's index range into ``names``.
        keep: this rank hands the bucket over (the tensors are returned on the CPU); other ranks
            join the gathers and return an empty list.

    Returns:
        ``[(name, full tensor), ...]`` (empty when not ``keep``).
    """
    tensors = module.state_dict(keep_vars=True)
    bucket: list[tuple[str, torch.Tensor]] = []
    for name in names[start:stop]:
        full = full_tensor(tensors[name])
        if keep:
            bucket.append((name, full.detach().to("cpu")))
    return bucket


@torch.no_grad()
def load_bucket_in_place(target: nn.Module, bucket: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy ``(name, tensor)`` pairs into ``target``'s tensors of the same names (dtype and device of ``target``).

    ``target``'s names are every parameter and buffer name, tied aliases and non-persistent
    buffers included, so both a state-dict stream and a ``named_parameters`` / ``named_buffers``
    walk match. ``bucket`` may be a generator: each pair is copied before the next is made.

    Returns:
        Number of tensors copied.

    Raises:
        KeyError: a name has no tensor in ``target``.
    """
    tensors = dict(target.named_parameters(remove_duplicate=False))
    tensors.update(target.named_buffers(remove_duplicate=False))
    copied = 0
    for name, value in bucket:
        if name not in tensors:
            raise KeyError(f"rollout module has no tensor named {name!r}")
        _copy_into(tensors[name], value)
        copied += 1
    return copied


def _copy_into(target: torch.Tensor, value: torch.Tensor) -> None:
    """Copy the whole ``value`` into ``target``; a tensor-parallel (``DTensor``) target takes only its
    own slice (cut locally from ``value``, no communication), so the rollout's TP layout is filled
    from the actor's whole tensors one at a time."""
    if not hasattr(target, "device_mesh"):
        target.data.copy_(value)
        return
    from torch.distributed.tensor import distribute_tensor

    mine = target.to_local()
    whole = value.to(device=mine.device, dtype=mine.dtype)
    mine.copy_(distribute_tensor(whole, target.device_mesh, target.placements, src_data_rank=None).to_local())
