"""The ``rl`` task stream of ``trainer.algorithm=hybrid``: GRPO on responses sampled from the actor itself.

Per optimizer step the stream takes ``batch_size`` prompts (verl RL rows, e.g.
``builtin://arithmetic/train``), and before the gradient pass, without gradient:

1. samples ``rollout_n`` responses per prompt with the product's rollout engine
   (`verl.workers.rollout.build_rollout_engine`, the ``hf`` engine generating with the actor's
   module; under data parallelism an unsharded copy refreshed from
   ``engine.state_for_rollout()`` through `verl.workers.rollout_sync.SyncedRollout`, as the RL
   worker does), with one seed per (``trainer.seed``, step, global trajectory index), so the
   samples do not depend on the number of ranks;
2. scores them with the task's reward manager, built as the RL trainer builds its own
   (`verl.trainer.ppo.reward.load_reward_manager`: ``reward_manager``, ``reward_timeout_s`` and
   ``custom_reward_function`` of the task; routed by ``data_source`` without a custom function);
   a sample the manager could not score (error, timeout) leaves the loss and its GRPO group, as
   in the RL trainer (`verl.trainer.ppo.reward_errors.mask_unscored_samples`);
3. computes GRPO advantages (`verl.algorithms.compute_advantage`, Shao et al. 2024) per prompt group;
4. computes ``old_log_probs`` with the current actor at the sampling temperature
   (`verl.workers.actor.compute_log_prob`, the RL worker's function, chunked by the task's
   ``logprob_chunk_size``).

Its loss is the RL trainer's (`verl.workers.actor.policy_loss_fn`) for an actor section built
from the task (`actor_config`): PPO's clipped surrogate (``policy_loss.loss_mode=vanilla``,
symmetric clip ``clip_ratio``) under ``logits / temperature``, token-mean over the step's global
response-token count. With one update per batch the ratio is 1 at the step, so the gradient is
the plain policy gradient ``−Σ A ∇log π_τ / N``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.algorithms import compute_advantage
from verl.config.schema import ActorConfig, PolicyLossConfig, RootConfig
from verl.engine.base import GlobalCounts, MicroBatchSpec
from verl.engine.dist import dp_rank, dp_world_size
from verl.protocol import DataProto, collate_fn
from verl.trainer.supervised.streams import StepSampler
from verl.trainer.ppo.reward_errors import mask_unscored_samples
from verl.workers.actor import compute_log_prob, policy_loss_fn
from verl.workers.rollout.layout import derive_seeds

__all__ = ["RLStream", "actor_config", "reward_config"]


def actor_config(task: Any) -> ActorConfig:
    """The actor section whose loss the stream trains with (`verl.workers.actor.policy_loss_fn`).

    Vanilla PPO loss with the symmetric clip ``task.clip_ratio``, token-mean aggregation, no
    entropy or KL term, the task's ``logprob_chunk_size``; every other field at the RL default.
    """
    c = task.clip_ratio
    return ActorConfig(
        clip_ratio=c,
        clip_ratio_low=c,
        clip_ratio_high=c,
        loss_agg_mode="token-mean",
        policy_loss=PolicyLossConfig(loss_mode="vanilla"),
        entropy_coeff=0.0,
        use_kl_loss=False,
        logprob_chunk_size=task.logprob_chunk_size,
    )


def reward_config(task: Any) -> RootConfig:
    """An RL config holding the task's reward settings where `load_reward_manager` reads them.

    ``reward_model.reward_manager`` = ``task.reward_manager``, ``reward_model.timeout_s`` =
    ``task.reward_timeout_s``, ``custom_reward_function`` = the task's; the rest at the defaults
    (``data.reward_fn_key`` = ``data_source``).
    """
    cfg = RootConfig()
    cfg.reward_model.reward_manager = task.reward_manager
    cfg.reward_model.timeout_s = task.reward_timeout_s
    cfg.custom_reward_function = task.custom_reward_function
    return cfg


class RLStream:
    """GRPO prompts as one hybrid stream (see the module docstring).

    Args:
        name: task name.
        files: RL data files (``prompt`` messages, ``data_source``, ``reward_model.ground_truth``).
        task: its `verl.config.sft_schema.HybridTaskConfig`.
        tokenizer: the actor's tokenizer.
        micro: micro-batching of the loss forward (trajectories).
        seed: ``trainer.seed``.
        max_length: ``data.max_length``: prompt + response tokens at most.
        device: compute device.
        remove_padding: packed forwards (``use_remove_padding``).
    """

    kind = "rl"
    mask_key = "response_mask"

    def __init__(
        self,
        name: str,
        files: list[str],
        task: Any,
        tokenizer: Any,
        micro: MicroBatchSpec,
        seed: int,
        max_length: int,
        device: str,
        remove_padding: bool = False,
    ) -> None:
        from verl.config.schema import DataConfig, RolloutConfig
        from verl.data.loader import create_rl_dataset
        from verl.trainer.ppo.reward import load_reward_manager

        prompt_len = max_length - task.response_length
        if prompt_len < 1:
            raise ValueError(
                f"hybrid task {name!r}: data.max_length={max_length} leaves no room for prompts "
                f"after response_length={task.response_length}"
            )
        data_cfg = DataConfig(train_files=list(files), val_files=[], max_prompt_length=prompt_len, truncation="left")
        self.name, self.task, self.tokenizer, self.micro, self.seed = name, task, tokenizer, micro, seed
        self.dataset = create_rl_dataset(list(files), tokenizer, data_cfg)
        self.sampler = StepSampler(len(self.dataset), task.batch_size, seed)
        self.reward_fn = load_reward_manager(reward_config(task), tokenizer)
        self.actor_cfg = actor_config(task)
        self.rollout_cfg = RolloutConfig(
            n=task.rollout_n,
            response_length=task.response_length,
            prompt_length=prompt_len,
            temperature=task.temperature,
            do_sample=True,
            seed=seed,
        )
        self.device, self.remove_padding = device, remove_padding
        self.engine: Any = None
        self.rollout: Any = None

    def attach(self, engine: Any, make_module: Any = None) -> None:
        """Bind the actor's engine and build the rollout engine on its module (or on an unsharded copy)."""
        from verl.workers.rollout import build_rollout_engine
        from verl.workers.rollout_sync import SyncedRollout

        self.engine = engine
        shared = engine.world_size == 1
        module = engine.module if shared else make_module().requires_grad_(False)
        self.rollout = SyncedRollout(
            build_rollout_engine(module, self.rollout_cfg, self.tokenizer),
            shared=shared,
            sync_check=self.rollout_cfg.sync_check,
        )  # attested when not shared

    def batch(self, step: int, rank: int, world_size: int) -> DataProto:
        """This rank's prompts of step ``step`` (left-padded)."""
        rows = [self.dataset[i] for i in self.sampler.indices(step, rank, world_size)]
        return DataProto.from_single_dict(collate_fn(rows))

    def prepare(self, batch: DataProto, step: int) -> tuple[DataProto, dict[str, float]]:
        """Rollout, reward, GRPO advantages and old log-probs (steps 1-4 of the module docstring)."""
        n, first = self.task.rollout_n, dp_rank() * len(batch)  # global index of this rank's first prompt
        batch.non_tensor_batch["uid"] = np.array([f"{step}-{first + i}" for i in range(len(batch))], dtype=object)
        gen = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids"], non_tensor_batch_keys=["uid"])
        gen = gen.repeat(n, interleave=True)
        # one seed per (step, global trajectory index): samples do not depend on the number of ranks
        gen.batch["sample_seeds"] = derive_seeds([self.seed, step, 7], len(gen) * dp_world_size())[
            first * n : first * n + len(gen)
        ]
        gen.meta_info.update({"pad_token_id": self.tokenizer.pad_token_id, "validate": False, "global_step": step})
        self.rollout.sync_weights(self.engine, force=True)
        out = self.rollout.generate_sequences(gen)
        out.meta_info.pop("metrics", None)
        full = out.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        full.non_tensor_batch.update(batch.repeat(n, interleave=True).non_tensor_batch)
        scored = self.reward_fn(full, return_dict=True)
        scores = scored["reward_tensor"]
        # as the RL trainer: an unscored sample (error, timeout) leaves the loss and its group
        reward_metrics = mask_unscored_samples(full, scored.get("reward_extra_info"))
        reward_metrics.update(scored.get("reward_metrics") or {})
        mask = full.batch["response_mask"]
        adv, _ = compute_advantage(
            "grpo", token_level_rewards=scores, response_mask=mask, index=full.non_tensor_batch["uid"]
        )
        full.batch["advantages"] = adv
        # scored as the RL worker scores them: logits / the sampling temperature, the actor's chunking
        full.batch["old_log_probs"], _ = compute_log_prob(
            self.engine,
            full,
            self.task.temperature,
            self.micro,
            chunk_size=self.actor_cfg.logprob_chunk_size,
            remove_padding=self.remove_padding,
        )
        seq_scores = scores.sum(-1)
        return full, {
            "score_mean": float(seq_scores.mean()),
            "response_length": float(mask.sum(-1).float().mean()),
            **{k: float(v) for k, v in reward_metrics.items()},
            **self.rollout.take_sync_metrics(),
        }

    def loss_fn(self, weight: float) -> Any:
        """``weight ·`` the RL trainer's policy loss of a micro-batch (`actor_config`, the sampling temperature).

        Metrics (additive over micro-batches and ranks): ``loss`` (the unweighted policy-gradient
        loss), ``pg_clipfrac`` and ``ppo_kl``.
        """
        inner = policy_loss_fn(self.actor_cfg, self.task.temperature, self.remove_padding)

        def fn(
            module: torch.nn.Module, micro: DataProto, counts: GlobalCounts
        ) -> tuple[torch.Tensor, dict[str, float]]:
            loss, metrics = inner(module, micro, counts)
            out = {"loss": float(metrics["actor/pg_loss"])}
            out.update({k: float(metrics[f"actor/{k}"]) for k in ("pg_clipfrac", "ppo_kl") if f"actor/{k}" in metrics})
            return weight * loss, out

        return fn

    @property
    def world_size(self) -> int:
        """Data-parallel size the stream runs under."""
        return dp_world_size()
