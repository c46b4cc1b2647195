"""The ``rl`` task stream of ``trainer.algorithm=hybrid``: GRPO on responses sampled from the actor itself.

Per optimizer step the stream takes ``batch_size`` prompts (verl RL rows, e.g.
``builtin://arithmetic/train``), and before the gradient pass, without gradient:

1. samples ``rollout_n`` responses per prompt with the product's rollout engine
   (`verl.workers.rollout.build_rollout_engine`, the ``hf`` engine generating with the actor's
   module; under data parallelism an unsharded copy refreshed from
   ``engine.state_for_rollout()`` through `verl.workers.rollout_sync.SyncedRollout`, as the RL
   worker does), with one seed per (``trainer.seed``, step, global trajectory index), so the
   samples do not depend on the number of ranks;
2. scores them with the rule reward manager (`verl.reward.create_reward_manager`, routed by
   ``data_source``);
3. computes GRPO advantages (`verl.algorithms.compute_advantage`, Shao et al. 2024) per prompt group;
4. computes ``old_log_probs`` with the current actor (`TrainingEngine.infer_batch`).

Its loss is PPO's clipped surrogate (``POLICY_LOSSES["vanilla"]``) aggregated as token-mean over
the step's global response-token count (`verl.algorithms.agg_loss`). With one update per batch
the ratio is 1 at the step, so the gradient is the plain policy gradient ``−Σ A ∇log π / N``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.algorithms import POLICY_LOSSES, agg_loss, compute_advantage
from verl.engine.base import GlobalCounts, MicroBatchSpec
from verl.engine.dist import dp_rank, dp_world_size
from verl.protocol import DataProto, collate_fn
from verl.trainer.hybrid_streams import StepSampler
from verl.workers.rollout.sampling import derive_seeds

__all__ = ["RLStream"]


def _response_logps(module: torch.nn.Module, micro: DataProto, remove_padding: bool) -> torch.Tensor:
    from verl.modules.forward import compute_log_probs_and_entropy

    b, dev = micro.batch, next(module.parameters()).device
    ids, attn, pos = (b[k].to(dev) for k in ("input_ids", "attention_mask", "position_ids"))
    return compute_log_probs_and_entropy(module, ids, attn, pos, b["responses"].shape[-1], compute_entropy=False,
                                         remove_padding=remove_padding)[0]


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

    def __init__(self, name: str, files: list[str], task: Any, tokenizer: Any, micro: MicroBatchSpec, seed: int,
                 max_length: int, device: str, remove_padding: bool = False) -> None:
        from verl.config.schema import DataConfig, RolloutConfig
        from verl.data.loader import create_rl_dataset
        from verl.reward import create_reward_manager

        prompt_len = max_length - task.response_length
        if prompt_len < 1:
            raise ValueError(f"hybrid task {name!r}: data.max_length={max_length} leaves no room for prompts "
                             f"after response_length={task.response_length}")
        data_cfg = DataConfig(train_files=list(files), val_files=[], max_prompt_length=prompt_len, truncation="left")
        self.name, self.task, self.tokenizer, self.micro, self.seed = name, task, tokenizer, micro, seed
        self.dataset = create_rl_dataset(list(files), tokenizer, data_cfg)
        self.sampler = StepSampler(len(self.dataset), task.batch_size, seed)
        self.reward_fn = create_reward_manager("naive", tokenizer)
        self.rollout_cfg = RolloutConfig(n=task.rollout_n, response_length=task.response_length, prompt_length=prompt_len,
                                         temperature=task.temperature, do_sample=True, seed=seed)
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
        self.rollout = SyncedRollout(build_rollout_engine(module, self.rollout_cfg, self.tokenizer), shared=shared,
                                     sync_check=self.rollout_cfg.sync_check)  # attested when not shared

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
        gen.batch["sample_seeds"] = derive_seeds([self.seed, step, 7], len(gen) * dp_world_size())[first * n : first * n + len(gen)]
        gen.meta_info.update({"pad_token_id": self.tokenizer.pad_token_id, "validate": False, "global_step": step})
        self.rollout.sync_weights(self.engine, force=True)
        out = self.rollout.generate_sequences(gen)
        out.meta_info.pop("metrics", None)
        full = out.select(batch_keys=["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        full.non_tensor_batch.update(batch.repeat(n, interleave=True).non_tensor_batch)
        scores = self.reward_fn(full, return_dict=True)["reward_tensor"]
        mask = full.batch["response_mask"]
        adv, _ = compute_advantage("grpo", token_level_rewards=scores, response_mask=mask, index=full.non_tensor_batch["uid"])
        full.batch["advantages"] = adv
        full.batch["old_log_probs"] = self.engine.infer_batch(full, lambda m, mb: {"lp": _response_logps(m, mb, self.remove_padding)}, self.micro)["lp"]
        seq_scores = scores.sum(-1)
        return full, {"score_mean": float(seq_scores.mean()), "response_length": float(mask.sum(-1).float().mean()),
                      **self.rollout.take_sync_metrics()}

    def loss_fn(self, weight: float) -> Any:
        """``weight ·`` the clipped policy-gradient loss, token-mean over the step's global response tokens."""
        c = self.task.clip_ratio

        def fn(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts) -> tuple[torch.Tensor, dict[str, float]]:
            b = micro.batch
            log_prob = _response_logps(module, micro, self.remove_padding)
            dev = log_prob.device
            mask = b["response_mask"].to(dev, torch.float32)
            pg_losses, _ = POLICY_LOSSES["vanilla"](b["old_log_probs"].to(dev), log_prob, b["advantages"].to(dev), mask,
                                                     clip_ratio_low=c, clip_ratio_high=c)
            loss = agg_loss(pg_losses, mask, "token-mean", global_token_count=counts.tokens)
            return weight * loss, {"loss": float(loss.detach())}
        return fn

    @property
    def world_size(self) -> int:
        """Data-parallel size the stream runs under."""
        return dp_world_size()
