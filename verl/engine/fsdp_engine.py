"""`FSDPTrainingEngine`: the `TrainingEngine` of every trainer (PPO actor, critic, SFT, DPO).

One optimizer step over a mini-batch (`train_batch`):

1. global counts: the mini-batch's loss tokens and sequences summed over data-parallel ranks;
2. micro-batches: fixed size or packed by a token budget (`verl.engine.micro_batches`);
3. per micro-batch: ``loss, metrics = loss_fn(module, micro, counts)`` and
   ``(loss * world_size).backward()`` — the loss is already normalised by the *global* counts,
   and FSDP averages gradients over ranks, so the sum over micro-batches and ranks is the
   full-batch gradient;
4. metrics summed over micro-batches and ranks in one collective;
5. the gradient norm clipped to ``grad_clip``; a non-finite norm skips the step.

Sharding (FSDP2 with world size > 1) is applied by `build_engine`; the constructor only stores.
CPU offload: with world size > 1 FSDP2's ``CPUOffloadPolicy`` keeps parameters and optimizer
state on the CPU; with world size 1 on an accelerator the engine itself moves them to the CPU
between calls (`on_device`); on a CPU device everything already lives on the CPU.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from verl.engine.base import ForwardFn, GlobalCounts, LossFn, MicroBatchSpec, StepResult
from verl.engine.dist import all_reduce_sum, sum_floats
from verl.engine.fsdp import full_model_state, num_parameters, shard_module
from verl.engine.micro_batches import split_micro_batches
from verl.engine.optim import build_lr_scheduler, build_optimizer, clip_grad_and_step
from verl.engine.state_io import load_engine_state, save_engine_state
from verl.protocol import DataProto
from verl.utils.dtypes import torch_dtype
from verl.utils.seqlen_balancing import restore_order

if TYPE_CHECKING:
    from verl.config.schema import FSDPConfig, OptimConfig


class FSDPTrainingEngine:
    """A (possibly FSDP2-sharded) model with its optimizer and LR schedule on one rank.

    Args:
        module: the model, already sharded when ``world_size > 1`` (see `build_engine`).
        optimizer: None for a frozen model (reference policy, reward model): then only
            `infer_batch`, `save`/`load` of the weights and `state_for_rollout` apply.
        scheduler: LR scheduler stepped once per `lr_scheduler_step`, or None.
        grad_clip: max global gradient norm.
        world_size: ranks FSDP2 shards over and averages gradients over (data parallel × Ulysses
            sequence parallel: the SP ranks' losses are equal copies whose gradients add up, see
            `verl.workers.sharding.ulysses`); the loss multiplier.
        offload_params: keep parameters on the CPU between calls (world size 1, accelerator).
        offload_optimizer: keep optimizer state on the CPU between calls (same).
        device: where computation runs (``cpu`` or ``cuda``).
        autocast_dtype: world size 1 with ``fsdp_config.mixed_precision`` bfloat16 / float16: the
            forwards (training and inference) run under ``torch.autocast`` in that dtype, the
            parameters, gradients and optimizer stay float32 — the unsharded counterpart of FSDP2's
            ``MixedPrecisionPolicy(param_dtype)``, which only exists when the model is sharded.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        *,
        grad_clip: float = 1.0,
        world_size: int = 1,
        offload_params: bool = False,
        offload_optimizer: bool = False,
        device: str = "cpu",
        autocast_dtype: torch.dtype | None = None,
    ) -> None:
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.autocast_dtype = autocast_dtype
        self.grad_clip, self.world_size, self.device = grad_clip, world_size, device
        # FSDP2 offloads by itself when sharded; on a CPU device there is nothing to move
        manual = world_size == 1 and torch.device(device).type != "cpu"
        self.offload_params, self.offload_optimizer = manual and offload_params, manual and offload_optimizer
        self._offload()

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to ``autocast_dtype`` (mixed precision at world size 1), else nothing."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=self.autocast_dtype)

    # ------------------------------------------------------------------------------ training
    def global_counts(self, mini_batch: DataProto, mask_key: str) -> GlobalCounts:
        """Loss tokens (sum of ``mini_batch.batch[mask_key]``) and sequences, summed over ranks."""
        local = torch.tensor([mini_batch.batch[mask_key].sum().item(), float(len(mini_batch))], dtype=torch.float64)
        total = all_reduce_sum(local)
        return GlobalCounts(tokens=float(total[0]), sequences=float(total[1]))

    def forward_backward(self, micro_batch: DataProto, loss_fn: LossFn, counts: GlobalCounts) -> dict[str, float]:
        """Run ``loss_fn`` on one micro-batch and accumulate its gradient; returns its metrics.

        The loss is multiplied by the world size because FSDP averages gradients over ranks
        while the loss is already normalised by the global counts.
        """
        with self._autocast():
            loss, metrics = loss_fn(self.module, micro_batch, counts)
        (loss * self.world_size).backward()
        return {k: float(v) for k, v in metrics.items()}

    def optimizer_step(self) -> tuple[float, bool]:
        """Clip, step and zero the gradients; returns (grad_norm, stepped). A non-finite norm skips.

        Raises:
            RuntimeError: the engine has no optimizer (a frozen model).
        """
        if self.optimizer is None:
            raise RuntimeError("optimizer_step on an engine without an optimizer (a frozen model)")
        return clip_grad_and_step(self.module, self.optimizer, self.grad_clip)

    def train_batch(
        self, mini_batch: DataProto, loss_fn: LossFn, micro: MicroBatchSpec, mask_key: str = "response_mask"
    ) -> StepResult:
        """One optimizer step over this rank's share of a mini-batch (see the module docstring).

        Args:
            mini_batch: this rank's rows of one optimizer step.
            loss_fn: ``loss_fn(module, micro_batch, counts) -> (loss, metrics)``, the loss already
                divided by the global counts so that summing micro-batches gives the batch loss;
                metric values are summed the same way (weight per-token means by
                ``tokens_in_micro / counts.tokens``).
            micro: micro-batching of the forward/backward passes.
            mask_key: the `(B, L)` mask whose sum is the token count (``response_mask``, ``loss_mask``).
        """
        with self.on_device():
            self.module.train()
            counts = self.global_counts(mini_batch, mask_key)
            micros, _ = split_micro_batches(mini_batch, micro.size, micro.dynamic, micro.max_token_len)
            sums: dict[str, float] = defaultdict(float)
            for m in micros:
                for k, v in self.forward_backward(m, loss_fn, counts).items():
                    sums[k] += v
            metrics = sum_floats(sums)
            grad_norm, stepped = self.optimizer_step()
        return StepResult(metrics, grad_norm, stepped)

    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule by one step; returns the learning rate used before the step."""
        lr = self.current_lr()
        if self.scheduler is not None:
            self.scheduler.step()
        return lr

    def current_lr(self) -> float:
        """Learning rate of the first parameter group (0.0 without an optimizer)."""
        return float(self.optimizer.param_groups[0]["lr"]) if self.optimizer is not None else 0.0

    # ----------------------------------------------------------------------------- inference
    @torch.no_grad()
    def infer_batch(self, data: DataProto, forward_fn: ForwardFn, micro: MicroBatchSpec) -> dict[str, torch.Tensor]:
        """Per-row outputs of ``forward_fn`` over ``data``, on the CPU, in input row order.

        The module is in eval mode during the call and returns to its previous mode after.
        """
        micros, groups = split_micro_batches(data, micro.size, micro.dynamic, micro.max_token_len)
        outputs: dict[str, list[torch.Tensor]] = defaultdict(list)
        with self.on_device():
            was_training = self.module.training
            self.module.eval()
            for m in micros:
                with self._autocast():
                    out = forward_fn(self.module, m)
                for k, v in out.items():
                    outputs[k].append(v.cpu())
            self.module.train(was_training)
        stacked = {k: torch.cat(v) for k, v in outputs.items()}
        return stacked if groups is None else {k: restore_order(v, groups) for k, v in stacked.items()}

    # ------------------------------------------------------------------------- state, offload
    def save(self, out_dir: str) -> None:
        """Write weights, optimizer and scheduler state (collective; rank 0 writes)."""
        save_engine_state(self.module, self.optimizer, self.scheduler, out_dir)

    def load(self, in_dir: str) -> None:
        """Restore what `save` wrote, at any world size."""
        with self.on_device():
            load_engine_state(self.module, self.optimizer, self.scheduler, in_dir)

    def state_for_rollout(self) -> dict[str, torch.Tensor]:
        """The full (unsharded) state dict, for weight sync to a rollout engine (collective)."""
        return full_model_state(self.module)

    def num_parameters(self) -> int:
        """Total parameter count (the full size also when sharded)."""
        return num_parameters(self.module)

    @contextlib.contextmanager
    def on_device(self) -> Iterator[None]:
        """Parameters and optimizer state on the compute device inside the block (offload mode)."""
        if not (self.offload_params or self.offload_optimizer):
            yield
            return
        self._move(self.device)
        try:
            yield
        finally:
            self._offload()

    def _offload(self) -> None:
        if self.offload_params or self.offload_optimizer:
            self._move("cpu")

    def _move(self, device: str) -> None:
        if self.offload_params:
            self.module.to(device)
        if self.optimizer is not None and (self.offload_params or self.offload_optimizer):
            for state in self.optimizer.state.values():
                for k, v in state.items():
                    if isinstance(v, torch.Tensor) and k != "step":
                        state[k] = v.to(device)


def build_engine(
    module: torch.nn.Module,
    fsdp: FSDPConfig,
    world_size: int,
    *,
    optim: OptimConfig | None = None,
    total_steps: int = 0,
    grad_clip: float = 1.0,
    device: str = "cpu",
    mesh: Any = None,
) -> FSDPTrainingEngine:
    """Shard ``module`` (FSDP2 when ``world_size > 1``), build its AdamW and LR schedule, wrap them.

    Args:
        module: the model on ``device``.
        fsdp: sharding, mixed precision and offload settings (``*.fsdp_config``).
        world_size: ranks to shard over (data parallel × sequence parallel).
        optim: optimizer section; None builds a frozen (inference-only) engine.
        total_steps: number of `lr_scheduler_step` calls planned (cosine decay length).
        grad_clip: max global gradient norm.
        device: ``cpu`` or ``cuda``.
        mesh: the FSDP2 mesh when not the whole world (the ``dp`` dim under tensor parallelism,
            `verl.workers.sharding.tensor_parallel.shard_kwargs`; ``world_size`` is its size).
    """
    module = shard_module(module, fsdp, world_size, mesh)
    optimizer = scheduler = None
    if optim is not None:
        optimizer = build_optimizer(module, optim)
        scheduler = build_lr_scheduler(optimizer, optim, total_steps)
    mixed = torch_dtype(fsdp.mixed_precision) if fsdp.mixed_precision else None
    return FSDPTrainingEngine(
        module,
        optimizer,
        scheduler,
        grad_clip=grad_clip,
        world_size=world_size,
        offload_params=fsdp.param_offload,
        offload_optimizer=fsdp.optimizer_offload,
        device=device,
        autocast_dtype=mixed if world_size == 1 and mixed in (torch.bfloat16, torch.float16) else None,
    )
