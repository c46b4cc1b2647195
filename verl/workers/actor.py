"""PPO actor: log-probs of responses and the clipped policy-gradient update.

The loss of one optimizer step is aggregated with the *global* token / sequence count of the
whole mini-batch (all micro-batches, all data-parallel ranks), so splitting a mini-batch into
micro-batches or ranks never changes the loss or the gradient (known_faults B07, B08). Under
data parallelism FSDP averages gradients over ranks, so each rank's loss is multiplied by the
world size.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from verl.algorithms import POLICY_LOSSES, agg_loss, kl_penalty
from verl.modules.forward import compute_log_probs_and_entropy
from verl.protocol import DataProto
from verl.workers.engine import clip_grad_and_step, restore_order, split_micro_batches

if TYPE_CHECKING:
    from verl.config.schema import ActorConfig


def forward_response_logprobs(
    module: torch.nn.Module, micro: DataProto, temperature: float, calculate_entropy: bool, chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log π(response token | prefix) under ``logits / temperature`` `(B, R)`, and entropy `(B, R)`.

    ``micro`` holds ``input_ids``, ``attention_mask``, ``position_ids`` `(B, T)` (T = P + R,
    prompts left-padded) and ``responses`` `(B, R)`; the forward is `verl.modules.forward`'s,
    the same one the rollout-consistency test checks against the engine's sampling log-probs.
    """
    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    return compute_log_probs_and_entropy(
        module, ids, mask, pos, b["responses"].shape[-1],
        temperature=temperature, chunk_size=chunk_size, compute_entropy=calculate_entropy,
    )


def _loss_params(cfg: ActorConfig) -> dict[str, float]:
    """The policy-loss variant's own parameters (clip_cov / kl_cov), as keyword arguments."""
    params = dataclasses.asdict(cfg.policy_loss)
    params.pop("loss_mode")
    return params


def _all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum over data-parallel ranks (identity in one process); returned on the CPU."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        comm = "cpu" if dist.get_backend() == "gloo" else f"cuda:{torch.cuda.current_device()}"
        value = value.detach().to(comm).clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.cpu()


def _reduce_floats(values: dict[str, float]) -> dict[str, float]:
    """Sum each per-rank float over data-parallel ranks in one collective."""
    keys = sorted(values)
    total = _all_reduce_sum(torch.tensor([values[k] for k in keys], dtype=torch.float64))
    return {k: float(v) for k, v in zip(keys, total.tolist())}


class PPOActor:
    """Computes log-probs and performs PPO updates on one data-parallel rank.

    Args:
        module: the policy (plain, peft-wrapped or FSDP2-sharded causal LM).
        optimizer: its optimizer; scheduler: LR scheduler stepped once per `update_policy` call.
        config: the actor section.
        world_size: data-parallel size (the loss is scaled by it; see module docstring).
    """

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any, config: ActorConfig, world_size: int = 1) -> None:
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.config, self.world_size = config, world_size

    @torch.no_grad()
    def compute_log_prob(
        self, data: DataProto, temperature: float, micro_batch_size: int | None, use_dynamic_bsz: bool,
        max_token_len: int, calculate_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs `(B, R)` (and entropy `(B, R)`) of ``data``'s responses, in input order."""
        micros, order = split_micro_batches(data, micro_batch_size, use_dynamic_bsz, max_token_len)
        was_training = self.module.training
        self.module.eval()
        logps, ents = [], []
        for m in micros:
            lp, ent = forward_response_logprobs(self.module, m, temperature, calculate_entropy, self.config.logprob_chunk_size)
            logps.append(lp.cpu())
            ents.append(ent.cpu() if ent is not None else None)
        self.module.train(was_training)
        log_probs = restore_order(torch.cat(logps), order)
        entropy = restore_order(torch.cat(ents), order) if calculate_entropy else None
        return log_probs, entropy

    def update_policy(self, data: DataProto, temperature: float, mini_batch_size: int, micro_batch_size: int | None) -> dict[str, Any]:
        """PPO epochs over mini-batches of ``data``; returns metrics (global, identical on all ranks).

        Args:
            data: this rank's trajectories with ``old_log_probs``, ``advantages``,
                ``response_mask`` `(B, R)` (+ ``ref_log_prob`` when ``use_kl_loss``).
            temperature: rollout temperature.
            mini_batch_size: trajectories per optimizer step on this rank.
            micro_batch_size: trajectories per forward/backward (fixed mode).
        """
        cfg = self.config
        self.module.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        generator = torch.Generator().manual_seed(cfg.data_loader_seed or 0)
        for _ in range(cfg.ppo_epochs):
            if cfg.shuffle:
                data = data[torch.randperm(len(data), generator=generator)]
            for mini in data.split(mini_batch_size):
                step_metrics = self._optimizer_step(mini, temperature, micro_batch_size)
                for k, v in step_metrics.items():
                    metrics[k].append(v)
        if self.scheduler is not None:
            metrics["actor/lr"].append(self.optimizer.param_groups[0]["lr"])
            self.scheduler.step()
        return {k: float(sum(v) / len(v)) if k != "actor/grad_norm_nonfinite" else float(sum(v)) for k, v in metrics.items()}

    def _optimizer_step(self, mini: DataProto, temperature: float, micro_batch_size: int | None) -> dict[str, float]:
        cfg = self.config
        mask_all = mini.batch["response_mask"]
        counts = _all_reduce_sum(torch.tensor([mask_all.sum().item(), float(len(mini))], dtype=torch.float64))
        global_tokens, global_seqs = float(counts[0]), float(counts[1])
        micros, _ = split_micro_batches(mini, micro_batch_size, cfg.use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu)
        sums: dict[str, float] = defaultdict(float)
        loss_fn = POLICY_LOSSES[cfg.policy_loss.loss_mode]
        agg = dict(loss_agg_mode=cfg.loss_agg_mode, global_token_count=global_tokens, global_seq_count=global_seqs,
                   loss_scale_factor=cfg.loss_scale_factor)
        device = next(self.module.parameters()).device
        for m in micros:
            b = m.batch
            mask = b["response_mask"].to(device=device, dtype=torch.float32)
            log_prob, entropy = forward_response_logprobs(self.module, m, temperature, True, cfg.logprob_chunk_size)
            pg_losses, pg_metrics = loss_fn(
                b["old_log_probs"].to(device), log_prob, b["advantages"].to(device), mask,
                clip_ratio_low=cfg.clip_ratio_low if cfg.clip_ratio_low is not None else cfg.clip_ratio,
                clip_ratio_high=cfg.clip_ratio_high if cfg.clip_ratio_high is not None else cfg.clip_ratio,
                clip_ratio_c=cfg.clip_ratio_c, **_loss_params(cfg),
            )
            if "rollout_is_weights" in b.keys():  # algorithm.rollout_correction: truncated IS weights
                pg_losses = pg_losses * b["rollout_is_weights"].to(device)
            pg_loss = agg_loss(pg_losses, mask, **agg)
            ent_loss = agg_loss(entropy, mask, **agg)
            loss = pg_loss - cfg.entropy_coeff * ent_loss
            if cfg.use_kl_loss:
                kld = kl_penalty(log_prob, b["ref_log_prob"].to(device), cfg.kl_loss_type)
                kl_loss = agg_loss(kld, mask, **agg)
                loss = loss + cfg.kl_loss_coef * kl_loss
                sums["actor/kl_loss"] += float(kl_loss.detach())
            (loss * self.world_size).backward()
            tokens = float(mask.sum())
            sums["actor/pg_loss"] += float(pg_loss.detach())
            sums["actor/entropy"] += float(ent_loss.detach())
            for name in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
                if name in pg_metrics:
                    sums[f"actor/{name}"] += float(pg_metrics[name]) * tokens / global_tokens
        reduced = _reduce_floats(sums)
        grad_norm, stepped = clip_grad_and_step(self.module, self.optimizer, cfg.grad_clip)
        reduced["actor/grad_norm"] = grad_norm
        reduced["actor/grad_norm_nonfinite"] = 0.0 if stepped else 1.0
        if cfg.use_kl_loss:
            reduced["actor/kl_coef"] = cfg.kl_loss_coef
        return reduced
