"""`TrainingEngine`: what every trainer (PPO actor, critic, SFT, DPO, hybrid) needs from a model.

A trainer owns its *loss*; the engine owns everything else: micro-batch forward/backward with a
loss function given the mini-batch's global token / sequence counts (so micro-batching and the
number of data-parallel ranks never change the gradient), the optimizer
step with gradient clipping and the non-finite skip, the LR schedule, FSDP2 wrapping, CPU
offload, and state save / load. Packed (padding-free) micro-batches plug in here once.
The implementation is `verl.engine.fsdp_engine.FSDPTrainingEngine` (built by `build_engine`).

Losses are written per micro-batch and already normalised by the *global* counts, e.g. a
token-mean loss is ``sum(token losses in micro) / counts.tokens``; the engine only sums the
micro-batch losses (times the data-parallel world size, because FSDP averages gradients).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from verl.protocol import DataProto

__all__ = ["ForwardFn", "GlobalCounts", "LossFn", "MicroBatchSpec", "StepResult", "TrainingEngine"]


@dataclass(frozen=True)
class GlobalCounts:
    """Counts over one optimizer step's whole mini-batch, summed over every data-parallel rank.

    Attributes:
        tokens: number of loss tokens (mask sum).
        sequences: number of sequences.
    """

    tokens: float
    sequences: float


# loss_fn(module, micro_batch, counts) -> (scalar loss of this micro-batch, metrics of it)
LossFn = Callable[[torch.nn.Module, DataProto, GlobalCounts], "tuple[torch.Tensor, dict[str, float]]"]


# forward_fn(module, micro_batch) -> named per-row outputs, each (b, ...) for the b rows of the micro-batch
ForwardFn = Callable[[torch.nn.Module, DataProto], "dict[str, torch.Tensor]"]


@dataclass(frozen=True)
class MicroBatchSpec:
    """How a per-rank batch is cut into micro-batches.

    Attributes:
        size: trajectories per micro-batch in fixed mode (None = the whole batch at once).
        dynamic: pack micro-batches by effective token count (``use_dynamic_bsz``).
        max_token_len: token budget per micro-batch in dynamic mode (``*_max_token_len_per_gpu``).
    """

    size: int | None = None
    dynamic: bool = False
    max_token_len: int = 0


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step reports.

    Attributes:
        metrics: the loss function's metrics, summed over micro-batches and ranks.
        grad_norm: global gradient norm before clipping (NaN/inf when the step was skipped).
        stepped: False when the non-finite norm skipped the update.
    """

    metrics: dict[str, float]
    grad_norm: float
    stepped: bool


@runtime_checkable
class TrainingEngine(Protocol):
    """A model under training on one data-parallel rank.

    Attributes:
        module: the (possibly FSDP2-sharded) model.
        world_size: data-parallel size.
    """

    module: torch.nn.Module
    world_size: int

    def global_counts(self, mini_batch: DataProto, mask_key: str) -> GlobalCounts:
        """Token (sum of ``mini_batch.batch[mask_key]``) and sequence counts summed over ranks."""
        ...

    def forward_backward(self, micro_batch: DataProto, loss_fn: LossFn, counts: GlobalCounts) -> dict[str, float]:
        """Run ``loss_fn`` on one micro-batch and accumulate its gradient; returns its metrics."""
        ...

    def optimizer_step(self) -> tuple[float, bool]:
        """Clip, step and zero the gradients; returns (grad_norm, stepped). A non-finite norm skips."""
        ...

    def train_batch(
        self, mini_batch: DataProto, loss_fn: LossFn, micro: MicroBatchSpec, mask_key: str = "response_mask"
    ) -> StepResult:
        """One optimizer step: `global_counts`, `forward_backward` per micro-batch, metrics summed
        over micro-batches and ranks, then `optimizer_step`. What trainers normally call."""
        ...

    def infer_batch(self, data: DataProto, forward_fn: ForwardFn, micro: MicroBatchSpec) -> dict[str, torch.Tensor]:
        """No-grad per-row outputs of ``forward_fn(module, micro_batch)`` in input row order (CPU)."""
        ...

    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule by one step; returns the learning rate used before the step."""
        ...

    def save(self, out_dir: str) -> None:
        """Write weights, optimizer and scheduler state (collective; rank 0 writes)."""
        ...

    def load(self, in_dir: str) -> None:
        """Restore what `save` wrote, at any world size."""
        ...

    def state_for_rollout(self) -> dict[str, Any]:
        """The full (unsharded) state dict, for weight sync to a rollout engine (collective)."""
        ...

    def num_parameters(self) -> int:
        """Total parameter count (the full size also when sharded)."""
        ...
