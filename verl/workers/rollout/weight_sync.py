"""The one weight bucketer: the actor's tensors, gathered whole and cut into byte buckets, for every rollout engine.

Every transfer of the actor's weights into a rollout engine's own copy goes through this module:

* the separate rollout pool (``hybrid_engine=false``): `verl.workers.weight_stream.WeightStream` sends the
  actor's state-dict names (`plan_state_buckets`) one bucket per call to a `RolloutWorker`; an ``hf`` worker
  copies them in place (`load_bucket_in_place`), a vLLM one maps them (`checkpoint_name`, `peft_save_name`,
  in `EngineWeightSync.load_stream_bucket`);
* the colocated vLLM engine (`EngineWeightSync.update`) and the model file it starts from
  (`verl.workers.rollout.vllm.vllm_config.prepare_engine`): Hugging Face checkpoint names
  (`plan_checkpoint_buckets`);
* the colocated ``hf`` engine's in-place sync (`verl.workers.rollout_sync.sync_in_place`): one tensor at a
  time, with the same gather (`full_tensor`) and the same in-place load (`load_bucket_in_place`).

Pieces: `plan_buckets` is the byte-bucket cutter (sizes in, index ranges out); `full_tensor` the
``DTensor`` -> whole-tensor gather; `checkpoint_name` / `peft_save_name` the name mapping; a
`BucketPlan` is one transfer decided before its first gather, `BucketPlan.gather` materialises one bucket.

Units: sizes are bytes of the whole (global, unsharded) tensor, ``numel * element_size`` (a ``DTensor``
reports its global ``numel``), so every rank of an FSDP2 / TP actor plans the same cut from its shards.

Ordering: a plan keeps its names' order (``module.state_dict()`` order for `plan_checkpoint_buckets`, the
caller's for `plan_state_buckets`); buckets are consecutive index ranges that cover every name exactly
once; within a bucket tensors are gathered, and yielded, in that order. Every rank of a sharded actor
must gather the same buckets in the same order (each ``full_tensor`` is a collective).

Peak memory of a transfer, beyond the actor's own shards: one bucket of whole tensors on ``device``
(at most ``bucket_bytes``, or one tensor larger than that) plus the one whole tensor being gathered
on the actor's device, i.e. at most the largest whole tensor + one bucket; a rank that does not keep
the bucket (``keep=False``) holds only the one tensor being gathered. This holds when the consumer
drops each bucket before asking for the next one (`BucketPlan.iter` makes a bucket only when asked).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "PEFT_PREFIX",
    "Bucket",
    "BucketPlan",
    "bucket_bytes_of",
    "checkpoint_name",
    "full_tensor",
    "is_lora_model",
    "load_bucket_in_place",
    "peft_save_name",
    "plan_buckets",
    "plan_checkpoint_buckets",
    "plan_state_buckets",
    "stream_names",
    "tensor_nbytes",
]

DEFAULT_BUCKET_BYTES = 256 * 2**20
"""Bucket size (bytes) of a colocated vLLM engine built without a rollout config."""
PEFT_PREFIX = "base_model.model."
"""What peft puts before the wrapped model's state-dict names."""

Bucket = list[tuple[str, torch.Tensor]]
"""``[(name, whole tensor), ...]``: one bucket, in plan order."""


# ----------------------------------------------------------------------------------------- sizes and cuts
def tensor_nbytes(tensor: torch.Tensor) -> int:
    """Bytes of the whole tensor: ``numel * element_size`` (a ``DTensor`` counts its global shape, not its shard)."""
    return tensor.numel() * tensor.element_size()


def plan_buckets(sizes: Sequence[int], bucket_bytes: int) -> list[tuple[int, int]]:
    """Cut tensors of ``sizes`` bytes, kept in their order, into consecutive buckets of at most ``bucket_bytes``.

    Greedy: a tensor joins the open bucket while the bucket's total stays ``<= bucket_bytes``, else it
    opens the next bucket. A tensor larger than ``bucket_bytes`` is never split: it is a bucket of its
    own. No bucket is empty. Example: sizes ``[32, 4000, 40, 1200, 120]``, ``bucket_bytes=1300`` ->
    ``[(0, 1), (1, 2), (2, 4), (4, 5)]`` (32 + 4000 > 1300; 4000 alone; 40 + 1200 = 1240; 1240 + 120 > 1300).

    Args:
        sizes: bytes of each whole tensor (>= 0), in transfer order.
        bucket_bytes: the bucket limit in bytes (> 0).

    Returns:
        ``[(start, stop), ...]`` index ranges into ``sizes``, in order, covering every index once
        (``[]`` for no tensors).

    Raises:
        ValueError: ``bucket_bytes <= 0`` or a negative size.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    plan: list[tuple[int, int]] = []
    start, total = 0, 0
    for pos, nbytes in enumerate(sizes):
        if nbytes < 0:
            raise ValueError(f"tensor size must be >= 0 bytes, got {nbytes} at position {pos}")
        if pos > start and total + nbytes > bucket_bytes:
            plan.append((start, pos))
            start, total = pos, 0
        total += nbytes
    if sizes:
        plan.append((start, len(sizes)))
    return plan


def bucket_bytes_of(rollout_config: Any) -> int:
    """Bytes of one bucket: ``rollout.checkpoint_engine.update_weights_bucket_megabytes`` MiB.

    Args:
        rollout_config: the ``actor_rollout_ref.rollout`` section (`RolloutConfig`).
    """
    return int(rollout_config.checkpoint_engine.update_weights_bucket_megabytes) * 2**20


# ----------------------------------------------------------------------------------------- the gather
def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a ``DTensor`` (FSDP2 shard, TP slice) is all-gathered into a new tensor (a
    collective every rank of its mesh enters), a plain tensor is returned as is (the same object)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


# ----------------------------------------------------------------------------------------- names
def is_lora_model(module: nn.Module) -> bool:
    """True for a peft model (the actor when ``model.lora_rank > 0``)."""
    return hasattr(module, "peft_config") and hasattr(module, "get_base_model")


def checkpoint_name(name: str, lora: bool) -> str | None:
    """The Hugging Face checkpoint name of an actor state-dict entry, or None for one a base-weight load skips.

    Without LoRA the name is kept (``model.layers.0.self_attn.q_proj.weight``; vLLM's ``load_weights``
    maps it onto its fused layers). For a peft model the wrappers are removed
    (``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`` ->
    ``model.layers.0.self_attn.q_proj.weight``) and the adapter's own entries (``lora_*``,
    ``modules_to_save``) give None. An ``hf`` rollout needs no mapping: its module comes from the same
    factory as the actor's, so it takes the state-dict names as they are.
    """
    if not lora:
        return name
    if "lora_" in name or "modules_to_save" in name:
        return None
    return name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def peft_save_name(name: str, adapter_name: str) -> str:
    """A LoRA entry's name in peft's save format: the adapter name dropped, exactly as
    ``peft.get_peft_model_state_dict`` does (``...q_proj.lora_A.default.weight`` -> ``...q_proj.lora_A.weight``)."""
    return name.replace(f".{adapter_name}", "")


def stream_names(module: nn.Module, trainable_only: bool) -> list[str]:
    """Names of the tensors one sync of the separate rollout pool sends, in a fixed order.

    Args:
        module: the actor (plain, peft or FSDP2-sharded).
        trainable_only: only parameters with ``requires_grad`` (what an update changes: every
            weight of a full fine-tune, only the adapter under LoRA), in ``named_parameters``
            order; otherwise every state-dict entry (parameters, tied aliases and persistent
            buffers), in state-dict order.
    """
    if trainable_only:
        return [name for name, p in module.named_parameters() if p.requires_grad]
    return list(module.state_dict(keep_vars=True).keys())


# ----------------------------------------------------------------------------------------- plans
@dataclass(frozen=True)
class BucketPlan:
    """One weight transfer, cut before its first gather (from global sizes, so every rank cuts alike).

    Attributes:
        names: the actor's state-dict names to gather, in transfer order.
        targets: the name the receiver gets for each entry of ``names`` (same length and order).
        sizes: bytes of each whole tensor (`tensor_nbytes`).
        bounds: `plan_buckets` of ``sizes``: one ``(start, stop)`` index range per bucket.
    """

    names: tuple[str, ...]
    targets: tuple[str, ...]
    sizes: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.bounds)

    @property
    def total_bytes(self) -> int:
        """Bytes of every tensor of the transfer."""
        return sum(self.sizes)

    def bucket_sizes(self) -> list[int]:
        """Bytes of each bucket, in order."""
        return [sum(self.sizes[start:stop]) for start, stop in self.bounds]

    @torch.no_grad()
    def gather(self, module: nn.Module, index: int, keep: bool = True, device: str | torch.device = "cpu") -> Bucket:
        """Materialise bucket ``index``: its whole tensors, one `full_tensor` at a time, in plan order.

        A collective when ``module`` is sharded: every rank calls it with the same ``index`` (``keep`` aside).

        Args:
            module: the actor the plan was made from.
            index: the bucket, ``0 <= index < len(self)``.
            keep: this rank hands the bucket over; other ranks join the gathers, drop each whole
                tensor as soon as it is made and return ``[]``.
            device: where the kept tensors live (the receiver's side: ``cpu`` for a transfer between
                processes, the engine's device for an in-process engine).

        Returns:
            ``[(target name, whole tensor), ...]`` (``[]`` when not ``keep``).

        Raises:
            IndexError: ``index`` out of range.
        """
        if not 0 <= index < len(self.bounds):
            raise IndexError(f"bucket {index} of a {len(self.bounds)}-bucket plan")
        start, stop = self.bounds[index]
        tensors = module.state_dict(keep_vars=True)
        bucket: Bucket = []
        for pos in range(start, stop):
            whole = full_tensor(tensors[self.names[pos]])
            if keep:
                bucket.append((self.targets[pos], whole.detach().to(device)))
        return bucket

    def iter(self, module: nn.Module, device: str | torch.device = "cpu") -> Iterator[Bucket]:
        """Every bucket in order (`gather` with ``keep=True``), each made only when the consumer asks for it."""
        for index in range(len(self.bounds)):
            yield self.gather(module, index, keep=True, device=device)


def _plan(module: nn.Module, names: Sequence[str], targets: Sequence[str], bucket_bytes: int) -> BucketPlan:
    tensors = module.state_dict(keep_vars=True)
    sizes = tuple(tensor_nbytes(tensors[name]) for name in names)
    return BucketPlan(tuple(names), tuple(targets), sizes, tuple(plan_buckets(sizes, bucket_bytes)))


def plan_state_buckets(module: nn.Module, names: Sequence[str], bucket_bytes: int) -> BucketPlan:
    """The plan that sends ``names`` under the actor's own state-dict names (the separate rollout pool).

    Args:
        module: the actor (plain, peft or FSDP2-sharded).
        names: `stream_names` of this sync.
        bucket_bytes: bucket limit in bytes (> 0).

    Raises:
        ValueError: ``bucket_bytes <= 0``.
        KeyError: a name that is not a state-dict entry of ``module``.
    """
    return _plan(module, names, names, bucket_bytes)


def plan_checkpoint_buckets(module: nn.Module, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> BucketPlan:
    """The plan that sends the actor's base weights under Hugging Face checkpoint names (a vLLM engine).

    Every state-dict entry in state-dict order (tied aliases included) under its `checkpoint_name`;
    a peft model's adapter entries are left out (the adapter moves as a file: ``lora_adapter_state``).
    A plain model's plan is `plan_state_buckets` of all its state-dict names.

    Raises:
        ValueError: ``bucket_bytes <= 0``.
    """
    lora = is_lora_model(module)
    pairs = [(name, checkpoint_name(name, lora)) for name in module.state_dict(keep_vars=True)]
    kept = [(name, target) for name, target in pairs if target is not None]
    return _plan(module, [n for n, _ in kept], [t for _, t in kept], bucket_bytes)


# ----------------------------------------------------------------------------------------- the receiving side
@torch.no_grad()
def load_bucket_in_place(target: nn.Module, bucket: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy ``(name, whole tensor)`` pairs into ``target``'s tensors of the same names (``target``'s dtype and device).

    ``target``'s names are every parameter and buffer name, tied aliases and non-persistent
    buffers included, so both a state-dict stream and a ``named_parameters`` / ``named_buffers``
    walk match. ``bucket`` may be a generator: each pair is copied before the next is made. A
    tensor-parallel (``DTensor``) tensor of ``target`` takes only its own slice, cut locally from the
    whole tensor (no communication), so a TP rollout is filled from whole tensors one at a time.

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
    """Copy the whole ``value`` into ``target``; a ``DTensor`` target takes its own slice (local cut)."""
    if not hasattr(target, "device_mesh"):
        target.data.copy_(value)
        return
    from torch.distributed.tensor import distribute_tensor

    mine = target.to_local()
    whole = value.to(device=mine.device, dtype=mine.dtype)
    mine.copy_(distribute_tensor(whole, target.device_mesh, target.placements, src_data_rank=None).to_local())
