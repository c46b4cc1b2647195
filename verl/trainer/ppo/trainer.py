"""`RLTrainer`: the single-controller RL loop (one driver process calls the worker groups).

``fit()`` reads like the algorithm: generate → reward → old log-probs → reference → values →
advantages → critic update → actor update → validate / checkpoint / log. Each stage is one call
on a worker group (local or Ray: decided in `verl.trainer.ppo.builders`, never here) inside a named
timer (``timing_s/<stage>``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl.algorithms import AdvantageConfig, apply_kl_penalty, compute_advantage, estimator_inputs
from verl.protocol import DataProto
from verl.reward.scoring import FailureCounts, RewardFailurePolicy
from verl.trainer.ppo.builders import build_parts, resolve_root
from verl.trainer.ppo.checkpoint import restore_checkpoint, write_checkpoint
from verl.trainer.guards import RunGuards, fit_with_rollback
from verl.trainer.ppo.metrics import (
    compute_data_metrics,
    compute_memory_metrics,
    compute_rollout_entropy_metrics,
    compute_seqlen_balance_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    reduce_worker_metrics,
    timer,
)
from verl.trainer.ppo.dumps import dump_rollout_data
from verl.trainer.ppo.reward_errors import mask_unscored_samples
from verl.trainer.ppo.rollout_corr import bypass_old_log_probs, rollout_correction_stage
from verl.trainer.ppo.truncation import mask_truncated_stage
from verl.trainer.ppo.state import TrainerParts, TrainerState
from verl.trainer.ppo.streaming_reward import PendingReward, build_streaming_rewards
from verl.run.tracking import progress_bar, update_bar
from verl.trainer.ppo.val_loop import run_validation
from verl.utils.arrays import object_array
from verl.workers.rollout.layout import derive_seeds
from verl.workers.rollout.trajectories import agent_loop_metrics

logger = logging.getLogger(__name__)
AGENT_INPUT_KEYS = ("raw_prompt", "extra_info", "agent_name")


class RLTrainer:
    """PPO-family trainer over worker groups.

    Args:
        config: the root config (`RootConfig`), or its ``trainer`` section as returned by
            `load_config` (the seed API ``RLTrainer(config=config.trainer, ...)``).
        dataloader: training `RLDataLoader`; None = built from ``config.data``.
        model_config: actor model section (``config.model``); None = the config's.
        parts: pre-built `TrainerParts` (tests inject mock groups here).
    """

    def __init__(
        self, config: Any, dataloader: Any = None, model_config: Any = None, parts: TrainerParts | None = None
    ) -> None:
        self.config = resolve_root(config, model_config)
        self._dataloader = dataloader
        self.parts = parts
        self.state = TrainerState()
        # stops a run whose reward function fails on every sample (or hangs) 3 steps in a row
        self._reward_failures = RewardFailurePolicy(timeout_s=self.config.reward_model.timeout_s)
        self._reward_keys: set[str] = set()  # per-sample values the reward manager reported
        self._sampler: Any = None  # DAPO dynamic sampling (algorithm.filter_groups)
        self._pending_timing: dict[str, float] = {}
        self._streaming: Any = None  # streaming rewards (reward_model.streaming), False where off
        # the estimator's own inputs decide the optional stages (ReMax: a greedy baseline per prompt)
        self._greedy_baseline = "reward_baselines" in estimator_inputs(self.config.algorithm.adv_estimator)
        self.guards = RunGuards(self.config)  # reward-hacking alarms, divergence sentinel (trainer.alarms / sentinel)

    @property
    def global_step(self) -> int:
        """RL steps done (``self.state.global_step``)."""
        return self.state.global_step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.state.global_step = value

    @property
    def epoch(self) -> int:
        """Epochs completed (``self.state.epoch``)."""
        return self.state.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.state.epoch = value

    # ----------------------------------------------------------------------------- public API
    def train(self) -> list[dict[str, float]]:
        """Alias of `fit` (the seed API name)."""
        return self.fit()

    def fit(self) -> list[dict[str, float]]:
        """Run RL until ``total_training_steps``; returns the per-step metrics.

        Worker processes (Ray backend) are released when it returns or raises.
        """
        try:
            return fit_with_rollback(self, self._fit)  # trainer.sentinel.action=rollback re-enters _fit
        finally:
            self.close()

    def close(self) -> None:
        """Shut down remote worker groups and release their resource pool (idempotent)."""
        if self._streaming:
            self._streaming.close()
        p = self.parts
        if p is None:
            return
        for wg in (p.actor_rollout_wg, p.critic_wg, p.rm_wg, p.teacher):
            if wg is not None:
                wg.shutdown()
        for pool in p.resource_pools:
            pool.release()
        p.resource_pools = []
        if p.tracker is not None:
            p.tracker.close()

    def _fit(self) -> list[dict[str, float]]:
        if self.config.trainer.v1.trainer_mode != "sync":  # verl's V1 async modes drive the same stages
            from verl.trainer.async_rl import fit_async

            return fit_async(self)
        p = self._parts()
        cfg = self.config
        resumed = self._load_checkpoint()
        p.tracker.keep_until(self.global_step if resumed else -1)
        if self.global_step >= p.total_training_steps:
            print(
                f"Training already complete: global_step {self.global_step} >= total_training_steps "
                f"{p.total_training_steps}; nothing to do.",
                flush=True,
            )
            return p.history
        if cfg.trainer.val_before_train and p.val_dataloader is not None and not resumed:
            val = self._validate()
            p.tracker.log(val, step=self.global_step)
            p.history.append({"step": self.global_step, **val})
            if cfg.trainer.val_only:
                return p.history
        bar = progress_bar(cfg.trainer.progress_bar, p.total_training_steps, self.global_step)
        save_timing: dict[str, float] = {}
        while self.global_step < p.total_training_steps:
            for batch_dict in p.train_dataloader:
                metrics = self.train_step(batch_dict)
                if metrics is None:  # dynamic sampling (DAPO) needs another generation batch
                    continue
                self.global_step += 1
                last = self.global_step >= p.total_training_steps
                # as verl: test_freq=-1 never validates during training, not even after the last step
                if (
                    p.val_dataloader is not None
                    and cfg.trainer.test_freq > 0
                    and (last or self.global_step % cfg.trainer.test_freq == 0)
                ):
                    metrics.update(self._validate())
                # the metrics row is durable before its checkpoint is published: a kill in between
                # redoes the step on resume instead of losing its row (timing_s/save_checkpoint is
                # therefore the previous save's duration)
                metrics.update(save_timing)
                p.tracker.log(metrics, step=self.global_step)
                p.history.append({"step": self.global_step, **metrics})
                if cfg.trainer.save_freq > 0 and (last or self.global_step % cfg.trainer.save_freq == 0):
                    with timer("save_checkpoint", t := {}):
                        self.save_checkpoint()
                    save_timing = {"timing_s/save_checkpoint": t["save_checkpoint"]}
                update_bar(bar, metrics)
                if last:
                    break
            else:
                self.epoch += 1
        if bar is not None:
            bar.close()
        return p.history

    # ------------------------------------------------------------------------------ one step
    def train_step(self, batch_dict: dict[str, Any]) -> dict[str, float] | None:
        """One RL step on one batch of prompts; returns its metrics.

        With ``algorithm.filter_groups.enable`` (DAPO dynamic sampling) a call may only add a
        generation batch and return None; the step runs when enough groups are kept.
        """
        p, cfg = self._parts(), self.config
        if self.guards.skip_batch(batch_dict):  # the batch that tripped the sentinel before a rollback
            return None
        rollout = cfg.actor_rollout_ref.rollout
        sampler = self._dynamic_sampler()
        metrics: dict[str, float] = {}
        timing: dict[str, float] = self._pending_timing if sampler is not None else {}
        k = sampler.num_gen_batches if sampler is not None else 0  # generation batch of this step
        with timer("step", timing):
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array(
                [f"{self.global_step}-{i}" if k == 0 else f"{self.global_step}-{k}-{i}" for i in range(len(batch))],
                dtype=object,
            )
            gen_batch = self._gen_batch(batch, validate=False)
            repeated = batch.repeat(rollout.n, interleave=True)
            with timer("gen", timing):  # with streaming rewards the trajectories are scored as they finish
                gen_out, pending = self.generate_scored(
                    p.actor_rollout_wg,
                    self._with_seeds(gen_batch.repeat(rollout.n, interleave=True), "train" if k == 0 else f"train{k}"),
                    repeated,
                )
            metrics.update(reduce_worker_metrics(gen_out.meta_info.pop("metrics", {})))
            metrics.update(agent_loop_metrics(gen_out))
            if self._greedy_baseline:
                with timer("gen_max", timing):
                    baselines = self._greedy_baselines(gen_batch, batch)
            batch = repeated
            batch.union(gen_out)
            if self._greedy_baseline:
                batch.batch["reward_baselines"] = baselines
            with timer("reward", timing):
                metrics.update(self._compute_reward(batch, pending))
            if sampler is not None:
                batch, sampling_metrics = sampler.add(batch)
                if batch is None:
                    return None
                metrics.update(sampling_metrics)
                self._pending_timing = {}
            entropys = self._update_stages(batch, metrics, timing)
        self._step_metrics(batch, metrics, timing, entropys)
        metrics.update(self.guards.after_step(self, batch, metrics))
        return metrics

    def _update_stages(
        self, batch: DataProto, metrics: dict[str, float], timing: dict[str, float]
    ) -> torch.Tensor | None:
        """Old log-probs, reference, values, advantages, critic and actor updates on a scored batch.

        Shared by the synchronous step and the asynchronous loop (`verl.trainer.async_rl`), which
        calls it once per mini-batch taken from its replay buffer. Returns the recomputed entropy
        `(B, R)` (None when the old-log-prob forward did not run).
        """
        p, cfg = self._parts(), self.config
        if cfg.trainer.balance_batch and p.world_size > 1:
            metrics.update(self._balance_batch(batch))
        entropys = None
        if cfg.algorithm.rollout_correction.bypass_mode:
            # as verl: the engine's log-probs stand in for the old ones, no old-log-prob forward
            bypass_old_log_probs(batch)
        elif not self._reuse_old_log_probs():
            with timer("old_log_prob", timing):
                old = p.actor_rollout_wg.compute_log_prob(batch)
            entropys = old.batch["entropys"]
            metrics.update(compute_rollout_entropy_metrics(entropys, batch.batch["response_mask"]))
            batch.union(
                old.select(batch_keys=[k for k in ("old_log_probs", "sum_pi_squared") if k in old.batch.keys()])
            )
        if self._use_reference():
            with timer("ref", timing):
                batch.union(p.actor_rollout_wg.compute_ref_log_prob(batch))
        if p.teacher is not None:  # on-policy distillation: the teacher scores the student's rollouts
            with timer("teacher", timing):
                metrics.update(p.teacher.score(batch))
        if p.critic_wg is not None:
            with timer("values", timing):
                batch.union(p.critic_wg.compute_values(batch))
        with timer("adv", timing):
            metrics.update(self._compute_advantage(batch))
        if p.critic_wg is not None:
            with timer("update_critic", timing):
                out = p.critic_wg.update_critic(batch)
            metrics.update(reduce_worker_metrics(out.meta_info["metrics"]))
        metrics.update(rollout_correction_stage(batch, cfg.algorithm.rollout_correction))
        actor_batch = batch
        if cfg.actor_rollout_ref.actor.mask_truncated_completions:
            # the actor's own view: the step's data metrics keep the responses as generated
            actor_batch = batch.select()
            metrics.update(mask_truncated_stage(actor_batch, _as_ids(batch.meta_info.get("eos_token_id"))))
        if self.global_step >= cfg.trainer.critic_warmup:
            self.guards.before_update(self, actor_batch)
            with timer("update_actor", timing):
                out = p.actor_rollout_wg.update_actor(actor_batch)
            metrics.update(reduce_worker_metrics(out.meta_info["metrics"]))
        return entropys

    def _step_metrics(
        self, batch: DataProto, metrics: dict[str, float], timing: dict[str, float], entropys: torch.Tensor | None
    ) -> None:
        """The rollout dump and the step's data, timing, memory and throughput metrics (into ``metrics``)."""
        p, cfg = self._parts(), self.config
        if cfg.trainer.rollout_data_dir:
            dump_rollout_data(
                batch,
                p.tokenizer,
                cfg.trainer.rollout_data_dir,
                self.global_step + 1,
                max_rows=cfg.trainer.rollout_data_max_rows,
                entropys=entropys,
                score_keys=sorted(self._reward_keys),
                policy_version=self.global_step,
            )
        metrics.update(compute_data_metrics(batch, use_critic=p.critic_wg is not None))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_memory_metrics(cfg.trainer.device))
        metrics.update(
            compute_throughput_metrics(
                batch, timing, p.world_size, p.n_params, cfg.actor_rollout_ref.actor.ppo_epochs, cfg.trainer.device
            )
        )
        metrics["training/global_step"] = float(self.global_step + 1)
        metrics["training/epoch"] = float(self.epoch)

    # ------------------------------------------------------------------------------- stages
    def _gen_batch(self, batch: DataProto, validate: bool) -> DataProto:
        """Pop the prompt tensors into the generation batch, with the sampling meta-info.

        Stop ids are the engine's own (every EOS id of the model's generation config and its
        tokenizer); the pad id is the data tokenizer's, as in the prompts.
        """
        gen = batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
        gen.meta_info.update(
            {
                "pad_token_id": self._parts().tokenizer.pad_token_id,
                "validate": validate,
                "global_step": self.global_step,
            }
        )
        for key in ("uid", *AGENT_INPUT_KEYS):  # agent loops read the messages, tools_kwargs, agent_name
            if key in batch.non_tensor_batch:
                gen.non_tensor_batch[key] = batch.non_tensor_batch[key]
        if self.config.data.apply_chat_template_kwargs:  # agent loops render prompts as the dataset did
            gen.meta_info["apply_chat_template_kwargs"] = dict(self.config.data.apply_chat_template_kwargs)
        return gen

    def _with_seeds(self, gen: DataProto, purpose: str) -> DataProto:
        """Add ``sample_seeds`` `(B,)`: one sampling seed per trajectory from (seed, step, purpose).

        Each row's randomness then depends only on these numbers, never on batching, on the
        number of workers, or on whether the run was resumed (see `verl.workers.rollout.sampling`).
        """
        key = [self.config.trainer.seed, self.global_step, sum(map(ord, purpose)) * 131 + len(purpose)]
        gen.batch["sample_seeds"] = derive_seeds(key, len(gen))
        return gen

    def _greedy_baselines(self, gen_batch: DataProto, batch: DataProto) -> torch.Tensor:
        """``reward_baselines`` `(B·n,)`: the score of each prompt's greedy response (ReMax, Li et al. 2023)."""
        p = self._parts()
        greedy = gen_batch.select(deepcopy=True)
        greedy.meta_info["do_sample"] = False
        out = p.actor_rollout_wg.generate_sequences(greedy)
        out.meta_info.pop("metrics", None)
        scored = batch.select(non_tensor_batch_keys=list(batch.non_tensor_batch.keys())).union(out)
        scores = p.reward_fn(scored, return_dict=True)["reward_tensor"].sum(-1)
        return scores.repeat_interleave(self.config.actor_rollout_ref.rollout.n)

    def _compute_advantage(self, batch: DataProto) -> dict[str, float]:
        """``token_level_rewards`` (minus the in-reward KL), then ``advantages`` and ``returns`` `(B, R)`.

        The estimator gets the common inputs, its settings as one `AdvantageConfig`, and any extra
        per-sample inputs it declares (`estimator_inputs`) from the batch.
        """
        p, algo = self._parts(), self.config.algorithm
        b = batch.batch
        metrics: dict[str, float] = {}
        if algo.use_kl_in_reward:
            rewards, kl_metrics = apply_kl_penalty(
                b["token_level_scores"],
                b["old_log_probs"],
                b["ref_log_prob"],
                b["response_mask"],
                p.kl_ctrl,
                algo.kl_penalty,
            )
            b["token_level_rewards"] = rewards
            metrics.update({k: float(v) for k, v in kl_metrics.items()})
        else:
            b["token_level_rewards"] = b["token_level_scores"]
        inputs: Any = b
        if algo.gdpo_reward_keys:  # gdpo's reward components (config checks: only with adv_estimator=gdpo)
            inputs = {
                **{k: b[k] for k in b.keys()},
                "reward_components": gdpo_reward_components(batch.non_tensor_batch, algo.gdpo_reward_keys),
            }
        weights = tuple(algo.gdpo_reward_weights) if algo.gdpo_reward_weights is not None else None
        advantages, returns = compute_advantage(
            algo.adv_estimator,
            token_level_rewards=b["token_level_rewards"],
            response_mask=b["response_mask"],
            index=batch.non_tensor_batch["uid"],
            values=b["values"] if "values" in b.keys() else None,
            config=AdvantageConfig(
                gamma=algo.gamma,
                lam=algo.lam,
                norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                norm_adv_by_std_in_rloo=algo.norm_adv_by_std_in_rloo,
                gdpo_reward_weights=weights,
            ),
            inputs=inputs,
            algorithm=algo,  # the whole section, for estimators written to verl's signature
        )
        b["advantages"], b["returns"] = advantages, returns
        return metrics

    def _balance_batch(self, batch: DataProto) -> dict[str, float]:
        """Reorder trajectories so each data-parallel rank gets a similar token count; ``global_seqlen/*``."""
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

        p = self._parts()
        lens = batch.batch["attention_mask"].sum(-1).tolist()
        parts = get_seqlen_balanced_partitions(lens, p.world_size, equal_size=True)
        batch.reorder(torch.tensor([i for part in parts for i in sorted(part)]))
        return compute_seqlen_balance_metrics(lens, parts)

    def _dynamic_sampler(self) -> Any:
        """The run's DAPO `DynamicSampler` (None unless ``algorithm.filter_groups.enable``)."""
        fg = self.config.algorithm.filter_groups
        if not fg.enable:
            return None
        if self._sampler is None:
            from verl.trainer.ppo.dynamic_sampling import DynamicSampler

            self._sampler = DynamicSampler(fg.metric, fg.max_num_gen_batches, self.config.data.train_batch_size)
        return self._sampler

    def generate_scored(self, wg: Any, gen: DataProto, prompts: DataProto) -> tuple[DataProto, PendingReward | None]:
        """``wg.generate_sequences(gen)``; with streaming rewards also the pending scores of its
        trajectories, scored as they finish (`verl.trainer.ppo.streaming_reward`), else None.

        Args:
            gen: the generation batch, `B` rows; prompts: its `B` prompt rows (non-tensor fields).
        """
        if self._streaming is None:
            p = self._parts()
            self._streaming = build_streaming_rewards(self.config, p.reward_fn, p.rm_wg) or False
        if not self._streaming:
            return wg.generate_sequences(gen), None
        return self._streaming.generate(wg, gen, prompts)

    def _compute_reward(self, batch: DataProto, pending: PendingReward | None = None) -> dict[str, float]:
        """``token_level_scores`` `(B, R)`: the reward model's score when enabled (as verl, it
        replaces the rule scorers), else the reward manager's rule / custom scores; ``pending``:
        the streamed scores of the batch's generation call (`generate_scored`)."""
        p = self._parts()
        if p.rm_wg is not None:
            scores = pending.result(batch)["reward_tensor"] if pending is not None else None
            batch.batch["token_level_scores"] = (
                scores if scores is not None else p.rm_wg.compute_rm_score(batch).batch["rm_scores"]
            )
            return {}
        reward = pending.result(batch) if pending is not None else p.reward_fn(batch, return_dict=True)
        batch.batch["token_level_scores"] = reward["reward_tensor"]
        # per-sample values the scorer reported (acc, pred, ...) travel with the batch, as in verl
        extra = {k: v for k, v in (reward.get("reward_extra_info") or {}).items() if len(v) == len(batch)}
        batch.non_tensor_batch.update({k: object_array(v) for k, v in extra.items()})
        self._reward_keys = set(extra)
        metrics = self._reward_extra_metrics(reward)
        metrics.update(mask_unscored_samples(batch, reward.get("reward_extra_info")))
        self._check_reward_failures(reward, len(batch))
        return metrics

    def _check_reward_failures(self, reward: dict[str, Any], n: int) -> None:
        """Stop a run whose reward function fails on every sample, or hangs, 3 steps in a row
        (`verl.reward.scoring.RewardFailurePolicy`, the policy of ``verl eval`` too).

        Single failures are contained (score 0, counted in ``reward/num_errors`` /
        ``reward/num_timeouts``); a scorer that never works would only burn compute on zero
        rewards, so that is an error.

        Raises:
            RewardFailureError: (a RuntimeError) the third failed step in a row.
        """
        counts = reward.get("reward_failures")
        if not isinstance(counts, FailureCounts):  # a verl-style manager or a merged result: its metrics
            counts = FailureCounts.from_metrics(reward.get("reward_metrics") or {}, n)
        self._reward_failures.check(counts)

    @staticmethod
    def _reward_extra_metrics(reward: dict[str, Any]) -> dict[str, float]:
        out = {k: float(v) for k, v in (reward.get("reward_metrics") or {}).items()}
        for k, v in (reward.get("reward_extra_info") or {}).items():
            if k == "pred":  # extracted answers, not a quantity (numeric strings would average)
                continue
            try:
                out[f"reward/{k}" if not k.startswith("reward/") else k] = float(np.mean(np.asarray(v, dtype=float)))
            except (TypeError, ValueError):
                continue
        return out

    def _reuse_old_log_probs(self) -> bool:
        """On-policy steps take old log-probs from the update forward (`reuses_old_log_probs`).

        Never with ``algorithm.rollout_correction`` active: its weights compare the recomputed
        old log-probs with the rollout's, which must exist before the update; nor with
        ``trainer.rollout_data_dir``, whose dump holds the training log-probs and entropy.
        """
        from verl.workers.actor import reuses_old_log_probs

        cfg = self.config
        rc = cfg.algorithm.rollout_correction
        if rc.rollout_is is not None or rc.rollout_rs is not None or rc.bypass_mode or cfg.trainer.rollout_data_dir:
            return False
        if "old_log_probs" in estimator_inputs(cfg.algorithm.adv_estimator):  # the optimal token baselines
            return False
        return reuses_old_log_probs(
            cfg.actor_rollout_ref.actor, cfg.data.train_batch_size, cfg.algorithm.use_kl_in_reward
        )

    def _use_reference(self) -> bool:
        cfg = self.config
        return cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss

    # ---------------------------------------------------------------------------- validation
    def _validate(self) -> dict[str, float]:
        """Generate on the validation set, score, aggregate per data source (`val_loop.run_validation`)."""
        val = run_validation(self._parts(), self.config, self.global_step, self._gen_batch, self._with_seeds)
        self.guards.on_validation(self, val)  # the train/validation divergence alarm
        return val

    # --------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``global_step_N`` (all roles + trainer state) atomically; see `checkpoint`."""
        from verl.run.io_errors import disk_errors

        export_hf = None
        if self.config.trainer.save_hf:
            import functools

            from verl.run.hf_export import export_hf as _export

            export_hf = functools.partial(_export, verify=False)  # the manifest is written after this
        with disk_errors(self.config.trainer.default_local_dir):
            return write_checkpoint(self._parts(), self.state, self.config, export_hf)

    def _load_checkpoint(self) -> bool:
        from verl.run.io_errors import load_errors

        with load_errors(self.config.trainer.resume_from_path or self.config.trainer.default_local_dir):
            return restore_checkpoint(self._parts(), self.state, self.config.trainer)

    # ------------------------------------------------------------------------------- helpers
    def _parts(self) -> TrainerParts:
        if self.parts is None:
            self.parts = build_parts(self.config, dataloader=self._dataloader)
        return self.parts


def gdpo_reward_components(non_tensor_batch: dict[str, Any], keys: list[str]) -> torch.Tensor:
    """`(K, B)` float64: the reward function's per-sample values of ``algorithm.gdpo_reward_keys``.

    Raises:
        ValueError: a key the reward function did not report, or a value that is not a number.
    """
    rows = []
    for key in keys:
        if key not in non_tensor_batch:
            known = sorted(k for k in non_tensor_batch if k not in ("uid",))
            raise ValueError(
                f"algorithm.gdpo_reward_keys: {key!r} is not in the reward function's per-sample extra "
                f"info (its compute_score must return a dict with it); the batch has {known}"
            )
        try:
            rows.append(torch.as_tensor(np.asarray(non_tensor_batch[key], dtype=np.float64)))
        except (TypeError, ValueError):
            raise ValueError(f"algorithm.gdpo_reward_keys: the values of {key!r} are not numbers") from None
    return torch.stack(rows)


def _as_ids(ids: Any) -> list[int]:
    """An ``eos_token_id`` meta value (int, list or None) as a list of ints."""
    if ids is None:
        return []
    return [int(ids)] if isinstance(ids, (int, np.integer)) else [int(i) for i in ids]
