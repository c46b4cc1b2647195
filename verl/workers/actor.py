"""PPO actor: log-probs of responses and the clipped policy-gradient loss, over a `TrainingEngine`.

The actor owns only its loss; micro-batching, the global token / sequence counts (so splitting
a mini-batch into micro-batches or ranks never changes the loss or the gradient), the optimizer
step and the LR schedule are the engine's (`verl.engine`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from verl.algorithms import POLICY_LOSSES, agg_loss, kl_penalty
from verl.algorithms.policy_loss import loss_agg_mode_for
from verl.algorithms.token_selection import (
    entropy_quantile_threshold,
    high_entropy_token_mask,
    mismatch_metrics_from_sums,
    rollout_mismatch_sums,
)
from verl.engine import GlobalCounts, LossFn, MicroBatchSpec, TrainingEngine
from verl.engine.dist import all_gather_cat, all_reduce_max_float, all_reduce_sum
from verl.algorithms.logprob import sum_pi_squared_from_logits
from verl.modules.forward import compute_log_probs_and_entropy, response_logits
from verl.protocol import DataProto
from verl.workers.distill_loss import distillation_term, student_forward

if TYPE_CHECKING:
    from verl.config.schema import ActorConfig


def forward_response_logprobs(
    module: torch.nn.Module,
    micro: DataProto,
    temperature: float,
    calculate_entropy: bool,
    chunk_size: int = 1024,
    remove_padding: bool = False,
    head_recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log π(response token | prefix) under ``logits / temperature`` `(B, R)`, and entropy `(B, R)`.

    ``micro`` holds ``input_ids``, ``attention_mask``, ``position_ids`` `(B, T)` (T = P + R,
    prompts left-padded) and ``responses`` `(B, R)`; the forward is `verl.modules.forward`'s,
    the same one the rollout-consistency test checks against the engine's sampling log-probs;
    ``remove_padding`` packs the real tokens into one row (``model.use_remove_padding``);
    ``head_recompute``: ``actor.logprob_head_recompute``.
    """
    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
    return compute_log_probs_and_entropy(
        module,
        ids,
        mask,
        pos,
        b["responses"].shape[-1],
        temperature=temperature,
        chunk_size=chunk_size,
        compute_entropy=calculate_entropy,
        remove_padding=remove_padding,
        head_recompute=head_recompute,
    )


def compute_log_prob(
    engine: TrainingEngine,
    data: DataProto,
    temperature: float,
    micro: MicroBatchSpec,
    calculate_entropy: bool = False,
    chunk_size: int = 1024,
    remove_padding: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(B, R)` (and entropy `(B, R)`) of ``data``'s responses under ``engine``'s model.

    Serves the actor (``old_log_probs``) and the frozen reference policy (``ref_log_prob``) alike.
    """

    def forward(module: torch.nn.Module, m: DataProto) -> dict[str, torch.Tensor]:
        lp, ent = forward_response_logprobs(module, m, temperature, calculate_entropy, chunk_size, remove_padding)
        return {"log_probs": lp} if ent is None else {"log_probs": lp, "entropys": ent}

    out = engine.infer_batch(data, forward, micro)
    return out["log_probs"], out.get("entropys")


def compute_sum_pi_squared(
    engine: TrainingEngine,
    data: DataProto,
    temperature: float,
    micro: MicroBatchSpec,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """``sum_pi_squared`` `(B, R)`: Σ_v π(v)² of each response position (``actor.calculate_sum_pi_squared``).

    One extra no-grad forward of ``data`` (padded, the LM head on the response positions only);
    the optimal token baseline estimators read it with ``old_log_probs``.
    """

    def forward(module: torch.nn.Module, m: DataProto) -> dict[str, torch.Tensor]:
        b = m.batch
        device = next(module.parameters()).device
        ids, mask, pos = (b[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
        logits = response_logits(module, ids, mask, pos, b["responses"].shape[-1])
        return {"sum_pi_squared": sum_pi_squared_from_logits(logits, temperature, chunk_size)}

    return engine.infer_batch(data, forward, micro)["sum_pi_squared"]


def reuses_old_log_probs(actor: ActorConfig, train_batch_size: int, use_kl_in_reward: bool) -> bool:
    """Whether a step skips the old-log-prob forward and takes them from the update forward.

    Exactly on-policy: with one PPO epoch and one mini-batch per step, the update's only forward
    runs the very weights that produced the rollout's training batch, so its log-probs (detached)
    are the old log-probs a recompute would give — up to the recompute's own micro-batching,
    i.e. float rounding; the first (and only) PPO ratio is exactly 1 and the gradient equals the
    recompute path's. The rollout's own ``rollout_log_probs`` are never substituted, so the
    rollout engine and its numerics (vLLM, bf16) do not enter. Needed otherwise: a second epoch or
    mini-batch (the policy has moved), or ``algorithm.use_kl_in_reward`` (the KL penalty reads
    old log-probs before the update). Measured: the recompute was 18.5 % of a GSM8K
    step on CPU. TRL's GRPOTrainer makes the same choice when on-policy.

    Args:
        actor: the actor section (``reuse_old_log_probs``, ``ppo_epochs``, ``ppo_mini_batch_size``).
        train_batch_size: ``data.train_batch_size`` (prompts per step).
        use_kl_in_reward: ``algorithm.use_kl_in_reward``.
    """
    return (
        actor.reuse_old_log_probs
        and actor.ppo_epochs == 1
        and actor.ppo_mini_batch_size == train_batch_size
        and not use_kl_in_reward
    )


def _loss_params(cfg: ActorConfig) -> dict[str, Any]:
    """The policy-loss variant's own parameters (``policy_loss.*`` and SAPO's ``actor.tau_pos`` /
    ``actor.tau_neg``, where verl keeps them), as keyword arguments."""
    params = dataclasses.asdict(cfg.policy_loss)
    params.pop("loss_mode")
    return {**params, "tau_pos": cfg.tau_pos, "tau_neg": cfg.tau_neg}


@dataclasses.dataclass
class MismatchAccumulator:
    """The rollout/training mismatch sums of the update forwards that had no ``old_log_probs``.

    On-policy reuse (`reuses_old_log_probs`) skips the old-log-prob forward, so the driver's
    mismatch stage (`verl.trainer.ppo.rollout_corr`) has no training log-probs to compare; the update
    forward's own log-probs are those, and `policy_loss_fn` adds them here micro-batch by
    micro-batch. `metrics` reduces over ranks and gives the same ``training/rollout_*`` values
    the driver computes on the full batch.
    """

    sums: torch.Tensor = dataclasses.field(default_factory=lambda: torch.zeros(5, dtype=torch.float64))
    diff_max: float = 0.0

    def add(self, train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor) -> None:
        sums, diff_max = rollout_mismatch_sums(train_log_probs, rollout_log_probs, mask)
        self.sums += sums
        self.diff_max = max(self.diff_max, diff_max)

    def metrics(self) -> dict[str, float]:
        """The metrics over every rank's tokens (a collective: every rank calls it)."""
        return mismatch_metrics_from_sums(all_reduce_sum(self.sums), all_reduce_max_float(self.diff_max))


def policy_loss_fn(
    cfg: ActorConfig,
    temperature: float,
    remove_padding: bool = False,
    mismatch: MismatchAccumulator | None = None,
    bypass: dict[str, Any] | None = None,
    distill: Any = None,
) -> LossFn:
    """The PPO-family loss of one micro-batch: ``pg_loss − entropy_coeff·entropy (+ kl_loss_coef·kl)``.

    The entropy is computed only when ``entropy_coeff != 0`` (it is in the loss) or
    ``calculate_entropy`` (metric ``actor/entropy`` only, kept out of the backward pass). A
    micro-batch without ``old_log_probs`` uses its own detached log-probs as the behaviour policy
    (see `reuses_old_log_probs`), so its ratio is exactly 1; with ``mismatch`` given and the
    engine's ``rollout_log_probs`` in the batch, those log-probs also feed the mismatch metrics.

    A ``top_entropy_mask`` `(B, R)` in the micro-batch (``actor.top_entropy_quantile`` < 1, see
    `PPOActor.update_policy`) zeroes the per-token policy-gradient loss of the tokens it leaves
    out; the entropy and KL terms and every denominator keep all response tokens.

    ``distill`` (a `verl.workers.distill_loss.DistillationLossParams`, the batch's
    ``meta_info["distillation"]``) adds on-policy distillation's term against the teacher's scores
    in the micro-batch (`verl.workers.distill_loss.distillation_term`); a top-k loss takes the
    student's log-probs from the same padded forward that gives its logits.

    Every term is aggregated by ``cfg.loss_agg_mode`` with the mini-batch's global counts, so the
    micro-batch losses sum to the mini-batch loss. Metrics are additive the same way (per-token
    rates weighted by the micro-batch's share of tokens).
    """
    # algorithm.rollout_correction.bypass_mode: verl's bypass_mode loss replaces loss_mode (`bypass`:
    # its loss_type and RolloutCorrectionParams, from the batch's meta_info, see verl.trainer.ppo.rollout_corr)
    loss_mode = "bypass_mode" if bypass is not None else cfg.policy_loss.loss_mode
    policy_loss = POLICY_LOSSES[loss_mode]
    loss_params = {**_loss_params(cfg), **(bypass or {})}
    # sapo / geo_mean: verl aggregates their policy-gradient term in a fixed mode (`aggregated_by`)
    pg_agg_mode = loss_agg_mode_for(loss_mode, cfg.loss_agg_mode)
    low = cfg.clip_ratio_low if cfg.clip_ratio_low is not None else cfg.clip_ratio
    high = cfg.clip_ratio_high if cfg.clip_ratio_high is not None else cfg.clip_ratio
    with_entropy = cfg.entropy_coeff != 0 or cfg.calculate_entropy

    def loss_fn(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts) -> tuple[torch.Tensor, dict[str, Any]]:
        b = micro.batch
        device = next(module.parameters()).device
        mask = b["response_mask"].to(device=device, dtype=torch.float32)
        agg = dict(
            loss_agg_mode=cfg.loss_agg_mode,
            global_token_count=counts.tokens,
            global_seq_count=counts.sequences,
            loss_scale_factor=cfg.loss_scale_factor,
        )
        student_logits = None
        if distill is not None and distill.uses_topk:  # on-policy distillation's top-k loss reads the logits
            log_prob, entropy, student_logits = student_forward(
                module, micro, temperature, with_entropy, cfg.logprob_chunk_size
            )
        else:
            log_prob, entropy = forward_response_logprobs(
                module,
                micro,
                temperature,
                with_entropy,
                cfg.logprob_chunk_size,
                remove_padding,
                cfg.logprob_head_recompute,
            )
        # on-policy reuse (reuses_old_log_probs): the behaviour policy is this very forward
        old = b["old_log_probs"].to(device) if "old_log_probs" in b.keys() else log_prob.detach()
        if mismatch is not None and "old_log_probs" not in b.keys() and "rollout_log_probs" in b.keys():
            mismatch.add(log_prob, b["rollout_log_probs"].to(device), mask)
        pg_losses, pg_metrics = policy_loss(
            old,
            log_prob,
            b["advantages"].to(device),
            mask,
            clip_ratio_low=low,
            clip_ratio_high=high,
            clip_ratio_c=cfg.clip_ratio_c,
            **loss_params,
            loss_agg_mode=cfg.loss_agg_mode,
            config=cfg,  # for losses written to verl's signature
        )
        if "rollout_is_weights" in b.keys():  # algorithm.rollout_correction: truncated IS weights
            pg_losses = pg_losses * b["rollout_is_weights"].to(device)
        if "top_entropy_mask" in b.keys():  # actor.top_entropy_quantile: select, so no value leaks in
            pg_losses = torch.where(b["top_entropy_mask"].to(device), pg_losses, torch.zeros_like(pg_losses))
        pg_loss = agg_loss(pg_losses, mask, **{**agg, "loss_agg_mode": pg_agg_mode})
        loss = pg_loss
        metrics: dict[str, Any] = {"actor/pg_loss": pg_loss.detach()}
        if entropy is not None:
            # with entropy_coeff 0 the entropy stays out of the graph: its backward pass is skipped
            ent_loss = agg_loss(entropy if cfg.entropy_coeff else entropy.detach(), mask, **agg)
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * ent_loss
            metrics["actor/entropy"] = ent_loss.detach()
        if cfg.use_kl_loss:
            # the mask selects inside kl_penalty: a NaN in a padded ref slot never reaches log_prob's gradient
            kl_loss = agg_loss(kl_penalty(log_prob, b["ref_log_prob"].to(device), cfg.kl_loss_type, mask), mask, **agg)
            loss = loss + cfg.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = kl_loss.detach()
        # a mini-batch whose every token left the loss (truncation masking, rejection): no share
        share = float(mask.sum()) / counts.tokens if counts.tokens else 0.0
        if distill is not None:  # verl.workers.distill_loss: PPO + coef x distillation, or distillation alone
            d_loss, d_metrics = distillation_term(distill, log_prob, old, student_logits, b, mask, agg, share)
            loss = loss + d_loss if distill.use_task_rewards else d_loss
            metrics.update(d_metrics)
        for name in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
            if name in pg_metrics:
                metrics[f"actor/{name}"] = float(pg_metrics[name]) * share
        return loss, metrics

    return loss_fn


class PPOActor:
    """The PPO policy update on one data-parallel rank.

    Args:
        engine: the policy's `TrainingEngine` (model, optimizer, LR schedule).
        config: the actor section (loss settings, micro-batching, epochs).
        remove_padding: packed (padding-free) forwards (``model.use_remove_padding``).
    """

    def __init__(self, engine: TrainingEngine, config: ActorConfig, remove_padding: bool = False) -> None:
        self.engine, self.config, self.remove_padding = engine, config, remove_padding

    def update_policy(self, data: DataProto, temperature: float, mini_batch_size: int) -> dict[str, float]:
        """PPO epochs over mini-batches of ``data``; returns metrics (global, identical on all ranks).

        Args:
            data: this rank's trajectories with ``old_log_probs``, ``advantages``,
                ``response_mask`` `(B, R)` (+ ``ref_log_prob`` when ``use_kl_loss``).
            temperature: rollout temperature.
            mini_batch_size: trajectories per optimizer step on this rank.

        Without ``old_log_probs`` (on-policy reuse) and with ``rollout_log_probs``, the metrics
        include ``training/rollout_probs_diff_{max,mean,std}``, ``training/rollout_kl`` and
        ``training/rollout_k3_kl`` of the update forward (see `MismatchAccumulator`).
        """
        cfg = self.config
        if "old_log_probs" not in data.batch.keys() and (cfg.ppo_epochs != 1 or len(data) > mini_batch_size):
            raise ValueError(
                "update without old_log_probs needs one on-policy pass (ppo_epochs 1, one mini-batch); "
                f"got ppo_epochs {cfg.ppo_epochs}, {len(data)} rows for mini-batches of {mini_batch_size}"
            )
        micro = MicroBatchSpec(cfg.ppo_micro_batch_size_per_gpu, cfg.use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu)
        mismatch = MismatchAccumulator()
        loss_fn = policy_loss_fn(
            cfg,
            temperature,
            self.remove_padding,
            mismatch,
            bypass=data.meta_info.get("rollout_correction_bypass"),
            distill=data.meta_info.get("distillation"),
        )
        metrics: dict[str, list[float]] = defaultdict(list)
        generator = torch.Generator().manual_seed(cfg.data_loader_seed or 0)
        for _ in range(cfg.ppo_epochs):
            if cfg.shuffle:
                data = data[torch.randperm(len(data), generator=generator)]
            for mini in data.split(mini_batch_size):
                if cfg.top_entropy_quantile < 1.0:
                    metrics["actor/top_entropy_threshold"].append(self._select_high_entropy(mini, temperature, micro))
                step = self.engine.train_batch(mini, loss_fn, micro)
                for k, v in step.metrics.items():
                    metrics[k].append(v)
                metrics["actor/grad_norm"].append(step.grad_norm)
                metrics["actor/grad_norm_nonfinite"].append(0.0 if step.stepped else 1.0)
                if cfg.use_kl_loss:
                    metrics["actor/kl_coef"].append(cfg.kl_loss_coef)
        metrics["actor/lr"].append(self.engine.lr_scheduler_step())
        out = {
            k: float(sum(v) / len(v)) if k != "actor/grad_norm_nonfinite" else float(sum(v)) for k, v in metrics.items()
        }
        if "old_log_probs" not in data.batch.keys() and "rollout_log_probs" in data.batch.keys():
            out.update(mismatch.metrics())
        return out

    def _select_high_entropy(self, mini: DataProto, temperature: float, micro: MicroBatchSpec) -> float:
        """Put ``top_entropy_mask`` `(B, R)` into ``mini``: its tokens of highest entropy; returns τ.

        The entropies come from a no-grad forward of ``mini`` under the weights the update then
        differentiates (one extra forward per mini-batch), so τ — the ``(1 − ρ)`` quantile over
        the mini-batch's response tokens on every rank — and the selection do not depend on
        micro-batching. Reference: Wang et al. 2025, arXiv 2506.01939, the objective with
        I[H_t >= τ_ρ] over the batch's tokens.
        """
        cfg = self.config
        _, entropy = compute_log_prob(
            self.engine,
            mini,
            temperature,
            micro,
            calculate_entropy=True,
            chunk_size=cfg.logprob_chunk_size,
            remove_padding=self.remove_padding,
        )
        assert entropy is not None
        mask = mini.batch["response_mask"]
        tokens = all_gather_cat(entropy[mask != 0])
        threshold = entropy_quantile_threshold(tokens, cfg.top_entropy_quantile) if tokens.numel() else 0.0
        mini.batch["top_entropy_mask"] = high_entropy_token_mask(entropy, mask, threshold)
        return threshold
