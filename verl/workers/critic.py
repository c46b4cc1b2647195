"""PPO critic: per-token values and the clipped value-function loss, over a `TrainingEngine`.

Values for response token t are read at the position that *predicts* t (the last prompt
token for t = 0), matching the actor's log-prob alignment, so GAE's V(s_t) is the value of
the state before emitting token t. Loss normalisation, micro-batching and the optimizer step
are the engine's (global counts).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from verl.algorithms import compute_value_loss, masked_sum, zero_masked
from verl.engine import GlobalCounts, LossFn, MicroBatchSpec, TrainingEngine
from verl.modules.forward import compute_values
from verl.protocol import DataProto

if TYPE_CHECKING:
    from verl.config.schema import CriticConfig


def forward_values(module: torch.nn.Module, micro: DataProto, remove_padding: bool = False) -> torch.Tensor:
    """Values `(B, R)` float32 of the response positions of ``micro`` (see module docstring);
    ``remove_padding``: packed forward (``critic.model.use_remove_padding``)."""
    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    return compute_values(module, ids, mask, pos, b["responses"].shape[-1], remove_padding).float()


def value_loss_fn(cfg: CriticConfig) -> LossFn:
    """The clipped value loss of one micro-batch (PPO, Schulman et al. 2017), globally normalised."""

    def loss_fn(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts) -> tuple[torch.Tensor, dict[str, Any]]:
        b = micro.batch
        device = next(module.parameters()).device
        mask = b["response_mask"].to(device=device, dtype=torch.float32)
        vpreds = forward_values(module, micro, cfg.model.use_remove_padding)
        vf_loss, vf_metrics = compute_value_loss(
            vpreds,
            b["returns"].to(device),
            b["values"].to(device),
            mask,
            cliprange_value=cfg.cliprange_value,
            loss_agg_mode=cfg.loss_agg_mode,
            global_token_count=counts.tokens,
            global_seq_count=counts.sequences,
        )
        metrics: dict[str, Any] = {
            "critic/vf_loss": vf_loss.detach(),
            # summed over micro-batches: the masked mean over the mini-batch (verl's)
            "critic/vpred_mean": float(masked_sum(vpreds.detach(), mask)) / counts.tokens,
        }
        if "vf_clipfrac" in vf_metrics:
            metrics["critic/vf_clipfrac"] = float(vf_metrics["vf_clipfrac"]) * float(mask.sum()) / counts.tokens
        return vf_loss, metrics

    return loss_fn


class PPOCritic:
    """Computes values and performs value-function updates on one data-parallel rank.

    Args:
        engine: the value model's `TrainingEngine`.
        config: the critic section.
    """

    def __init__(self, engine: TrainingEngine, config: CriticConfig) -> None:
        self.engine, self.config = engine, config

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values `(B, R)`, zero outside ``response_mask``, in input order."""
        cfg = self.config
        micro = MicroBatchSpec(
            cfg.forward_micro_batch_size_per_gpu or cfg.ppo_micro_batch_size_per_gpu,
            cfg.use_dynamic_bsz,
            cfg.forward_max_token_len_per_gpu,
        )
        values = self.engine.infer_batch(
            data, lambda module, m: {"values": forward_values(module, m, cfg.model.use_remove_padding)}, micro
        )["values"]
        return zero_masked(values, data.batch["response_mask"])

    def update_critic(self, data: DataProto, mini_batch_size: int) -> dict[str, float]:
        """Value-loss epochs over mini-batches of ``data``; returns metrics (global)."""
        cfg = self.config
        micro = MicroBatchSpec(cfg.ppo_micro_batch_size_per_gpu, cfg.use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu)
        loss_fn = value_loss_fn(cfg)
        metrics: dict[str, list[float]] = defaultdict(list)
        # critic.shuffle: mini-batches drawn from a seeded permutation each epoch, as the actor's
        generator = torch.Generator().manual_seed(cfg.data_loader_seed or 0)
        for _ in range(cfg.ppo_epochs):
            if cfg.shuffle:
                data = data[torch.randperm(len(data), generator=generator)]
            for mini in data.split(mini_batch_size):
                step = self.engine.train_batch(mini, loss_fn, micro)
                for k, v in step.metrics.items():
                    metrics[k].append(v)
                metrics["critic/grad_norm"].append(step.grad_norm)
                metrics["critic/grad_norm_nonfinite"].append(0.0 if step.stepped else 1.0)
        metrics["critic/lr"].append(self.engine.lr_scheduler_step())
        return {k: float(sum(v) / len(v)) for k, v in metrics.items()}
