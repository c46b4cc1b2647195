"""The actor's side of a weight sync to a rollout engine on its own worker group: a bucket plan and its cursor.

Used when ``actor_rollout_ref.hybrid_engine=false`` (see `verl.trainer.ppo.split_rollout`). The
actor's module may be plain, peft (LoRA) or FSDP2-sharded (``DTensor`` parameters). A stream is
a fixed list of tensor names (`stream_names`) cut into buckets up front (`plan_state_buckets`, from
the *global* sizes, so every rank cuts the same way and the controller knows the bucket count
before the first gather); each `WeightStream.next` call materialises the next bucket's tensors one at
a time (``DTensor.full_tensor()``: a collective every actor rank enters in the same order). Only the
rank that hands the bucket over keeps the full tensors; the others drop each one as soon as the
gather returns. So an actor rank never holds more than one bucket (or one tensor larger than a
bucket) of unsharded weights beyond its shard. The cutting and the gather are the one bucketer of
every engine, `verl.workers.rollout.weight_sync`.

Names are the actor's own state-dict names. The receiving `RolloutWorker` builds its module with
the same factory from the same config, so the names match one to one (a vLLM worker maps them to
Hugging Face checkpoint names with `verl.workers.rollout.weight_sync.checkpoint_name`).
"""

from __future__ import annotations

from torch import nn

from verl.workers.rollout.weight_sync import Bucket, BucketPlan, plan_state_buckets, stream_names

__all__ = ["WeightStream"]


class WeightStream:
    """One sync's buckets, handed out in order (`next`); the actor worker keeps one per sync.

    Args:
        plan: the sync's `BucketPlan` (`start` makes it); the default is an empty stream.

    Attributes:
        plan: the `BucketPlan`; ``sent``: buckets handed out so far.
    """

    def __init__(self, plan: BucketPlan | None = None) -> None:
        self.plan = plan if plan is not None else BucketPlan((), (), (), ())
        self.sent = 0

    @classmethod
    def start(cls, module: nn.Module, trainable_only: bool, bucket_bytes: int) -> WeightStream:
        """Plan a sync of ``module`` (`stream_names`, `plan_state_buckets`); nothing is gathered yet.

        Args:
            module: the actor (plain, peft or FSDP2-sharded).
            trainable_only: send only parameters with ``requires_grad`` (after the first full sync).
            bucket_bytes: bucket limit in bytes (> 0); a single larger tensor forms its own bucket.

        Raises:
            ValueError: ``bucket_bytes <= 0``.
        """
        return cls(plan_state_buckets(module, stream_names(module, trainable_only), bucket_bytes))

    @property
    def tensors(self) -> int:
        """Tensors of the whole stream."""
        return len(self.plan.names)

    @property
    def buckets(self) -> int:
        """Buckets of the whole stream."""
        return len(self.plan)

    def next(self, module: nn.Module, keep: bool) -> Bucket:
        """The next bucket: ``[(state-dict name, whole CPU tensor), ...]``, ``[]`` when not ``keep``.

        A collective under FSDP2: every actor rank calls it the same number of times.

        Args:
            module: the actor the stream was planned from.
            keep: this rank hands the bucket over; the others only join the gathers.

        Raises:
            RuntimeError: every planned bucket was already handed out.
        """
        if self.sent >= len(self.plan):
            raise RuntimeError(f"weight stream: all {len(self.plan)} buckets were sent; start a new stream first")
        self.sent += 1
        return self.plan.gather(module, self.sent - 1, keep=keep, device="cpu")
