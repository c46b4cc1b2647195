"""PPO critic: per-token values and the clipped value-function update.

Values for response token t are read at the position that *predicts* t (the last prompt
token for t = 0), matching the actor's log-prob alignment, so GAE's V(s_t) is the value of
the state before emitting token t. Loss normalisation follows the actor (global counts,
known_faults B07).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from verl.algorithms import compute_value_loss
from verl.modules.forward import compute_values
from verl.protocol import DataProto
from verl.workers.actor import _all_reduce_sum, _reduce_floats
from verl.workers.engine import clip_grad_and_step, restore_order, split_micro_batches

if TYPE_CHECKING:
    from verl.config.schema import CriticConfig


def forward_values(module: torch.nn.Module, micro: DataProto) -> torch.Tensor:
    """Values `(B, R)` float32 of the response positions of ``micro`` (see module docstring)."""
    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    return compute_values(module, ids, mask, pos, b["responses"].shape[-1]).float()


class PPOCritic:
    """Computes values and performs value-function updates on one data-parallel rank."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, config: CriticConfig, world_size: int = 1) -> None:
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.config, self.world_size = config, world_size

    @torch.no_grad()
    def compute_values(self, data: DataProto, micro_batch_size: int | None) -> torch.Tensor:
        """Values `(B, R)`, zero outside ``response_mask``, in input order."""
        cfg = self.config
        micros, order = split_micro_batches(data, micro_batch_size, cfg.use_dynamic_bsz, cfg.forward_max_token_len_per_gpu)
        self.module.eval()
        values = restore_order(torch.cat([forward_values(self.module, m).cpu() for m in micros]), order)
        self.module.train()
        return values * data.batch["response_mask"]

    def update_critic(self, data: DataProto, mini_batch_size: int, micro_batch_size: int | None) -> dict[str, float]:
        """Clipped value loss (PPO, Schulman et al. 2017) over epochs and mini-batches; metrics."""
        cfg = self.config
        self.module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(cfg.ppo_epochs):
            for mini in data.split(mini_batch_size):
                for k, v in self._optimizer_step(mini, micro_batch_size).items():
                    metrics[k].append(v)
        if self.scheduler is not None:
            metrics["critic/lr"].append(self.optimizer.param_groups[0]["lr"])
            self.scheduler.step()
        return {k: float(sum(v) / len(v)) for k, v in metrics.items()}

    def _optimizer_step(self, mini: DataProto, micro_batch_size: int | None) -> dict[str, float]:
        cfg = self.config
        counts = _all_reduce_sum(torch.tensor([mini.batch["response_mask"].sum().item(), float(len(mini))], dtype=torch.float64))
        global_tokens, global_seqs = float(counts[0]), float(counts[1])
        micros, _ = split_micro_batches(mini, micro_batch_size, cfg.use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu)
        sums: dict[str, float] = defaultdict(float)
        device = next(self.module.parameters()).device
        for m in micros:
            b = m.batch
            mask = b["response_mask"].to(device=device, dtype=torch.float32)
            vpreds = forward_values(self.module, m)
            vf_loss, vf_metrics = compute_value_loss(
                vpreds, b["returns"].to(device), b["values"].to(device), mask, cliprange_value=cfg.cliprange_value,
                loss_agg_mode=cfg.loss_agg_mode, global_token_count=global_tokens, global_seq_count=global_seqs,
            )
            (vf_loss * self.world_size).backward()
            sums["critic/vf_loss"] += float(vf_loss.detach())
            if "vf_clipfrac" in vf_metrics:
                sums["critic/vf_clipfrac"] += float(vf_metrics["vf_clipfrac"]) * float(mask.sum()) / global_tokens
        reduced = _reduce_floats(sums)
        grad_norm, stepped = clip_grad_and_step(self.module, self.optimizer, cfg.grad_clip)
        reduced["critic/grad_norm"] = grad_norm
        reduced["critic/grad_norm_nonfinite"] = 0.0 if stepped else 1.0
        return reduced
