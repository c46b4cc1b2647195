"""Workers for each model role: `ActorRolloutRefWorker` (hybrid engine) and `CriticWorker`.

The same classes run under `LocalWorkerGroup` (world size 1: plain modules, the rollout uses
the actor's module directly, no copy) and `RayWorkerGroup` (one process per device: modules
sharded with FSDP2 ``fully_shard``; see `verl.workers.sharding`). Each method is declared with
its dispatch mode; the trainer never sees ranks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.workers.actor import PPOActor
from verl.workers.critic import PPOCritic
from verl.workers.engine import build_lr_scheduler, build_optimizer

if TYPE_CHECKING:
    from verl.config.schema import ActorRolloutRefConfig, CriticConfig


def _dtype(name: str | None) -> torch.dtype | None:
    return None if name is None else {"float32": torch.float32, "bfloat16": torch.bfloat16, "fp32": torch.float32, "bf16": torch.bfloat16}[name]


def _per_rank(global_size: int, world_size: int, what: str) -> int:
    if global_size % world_size:
        raise ValueError(f"{what}={global_size} is not divisible by the data-parallel size {world_size}")
    return global_size // world_size


class ActorRolloutRefWorker(Worker):
    """Actor, rollout and reference policy in one process, sharing one copy of the weights.

    Args:
        config: the ``actor_rollout_ref`` section (finalized: rollout lengths resolved).
        use_reference: build the reference policy (needed by ``use_kl_loss`` / ``use_kl_in_reward``).
        seed: seed of weight init and sampling.
        device: ``cpu`` or ``cuda`` (``trainer.device``).
    """

    def __init__(self, config: ActorRolloutRefConfig, use_reference: bool = False, seed: int = 1, device: str = "cpu") -> None:
        super().__init__(device)
        self.config, self.use_reference, self.seed = config, use_reference, seed
        self.actor: PPOActor | None = None
        self.ref_module: torch.nn.Module | None = None

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self, total_training_steps: int) -> None:
        """Load actor (+ reference), build optimizer, LR schedule and the rollout engine."""
        import copy

        from verl.modules import create_model, load_tokenizer
        from verl.workers.rollout import build_rollout_engine
        from verl.workers.rollout_sync import SyncedRollout
        from verl.workers.sharding import shard_module

        cfg = self.config
        torch.manual_seed(self.seed)
        module = create_model("actor", cfg.model, device=self.device)
        # sharded actor: the hf rollout generates with an unsharded copy (see rollout_sync); other
        # engines hold their own weights and only read the actor's config here
        in_place = cfg.rollout.name == "hf"
        rollout_module = module if self.world_size == 1 or not in_place else copy.deepcopy(module).requires_grad_(False)
        module = shard_module(module, cfg.actor.fsdp_config, self.world_size)
        optimizer = build_optimizer(module, cfg.actor.optim)
        scheduler = build_lr_scheduler(optimizer, cfg.actor.optim, total_training_steps)
        self.actor = PPOActor(module, optimizer, scheduler, cfg.actor, self.world_size)
        if self.use_reference and cfg.model.lora_rank == 0:
            ref = create_model("ref", cfg.model, device=self.device)
            self.ref_module = shard_module(ref.requires_grad_(False), cfg.ref.fsdp_config, self.world_size)
        tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
        self.rollout = SyncedRollout(build_rollout_engine(rollout_module, cfg.rollout, tokenizer), shared=self.world_size == 1 and in_place)
        if not in_place:  # the engine starts from the actor's config only: give it the weights
            self.rollout.sync_weights(self.actor.module, force=True)
        self.mini_batch_size = _per_rank(cfg.actor.ppo_mini_batch_size * cfg.rollout.n, self.world_size, "ppo_mini_batch_size * rollout.n")

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Responses for ``prompts`` (already repeated ``rollout.n`` times by the trainer)."""
        start = time.perf_counter()
        self.rollout.sync_weights(self.actor.module)
        out = self.rollout.generate_sequences(prompts)
        metrics = out.meta_info.setdefault("metrics", {})
        metrics["timing_s/generate_sequences"] = time.perf_counter() - start
        metrics["timing_s/weight_sync"] = self.rollout.last_sync_s
        metrics["timing_s/update_weights"] = self.rollout.last_sync_s  # verl's name for the same stage
        return out

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` `(B, R)` under the rollout temperature."""
        r = self.config.rollout
        log_probs, entropy = self.actor.compute_log_prob(
            data, r.temperature, r.log_prob_micro_batch_size_per_gpu, r.log_prob_use_dynamic_bsz,
            r.log_prob_max_token_len_per_gpu, calculate_entropy=True,
        )
        return DataProto.from_dict(tensors={"old_log_probs": log_probs, "entropys": entropy})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` `(B, R)`: the frozen reference policy (or the actor with LoRA disabled)."""
        from verl.modules import ref_policy_context

        r, ref_cfg = self.config.rollout, self.config.ref
        if self.ref_module is not None:
            ref_actor = PPOActor(self.ref_module, None, None, self.config.actor, self.world_size)
            log_probs, _ = ref_actor.compute_log_prob(
                data, r.temperature, ref_cfg.log_prob_micro_batch_size_per_gpu, ref_cfg.log_prob_use_dynamic_bsz,
                ref_cfg.log_prob_max_token_len_per_gpu,
            )
        else:
            with ref_policy_context(self.actor.module):
                log_probs, _ = self.actor.compute_log_prob(
                    data, r.temperature, ref_cfg.log_prob_micro_batch_size_per_gpu, ref_cfg.log_prob_use_dynamic_bsz,
                    ref_cfg.log_prob_max_token_len_per_gpu,
                )
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One RL step of PPO updates; metrics in ``meta_info["metrics"]``."""
        start = time.perf_counter()
        metrics = self.actor.update_policy(
            data, self.config.rollout.temperature, self.mini_batch_size, self.config.actor.ppo_micro_batch_size_per_gpu
        )
        metrics["timing_s/update_actor_worker"] = time.perf_counter() - start
        self.rollout.mark_stale()
        return DataProto(meta_info={"metrics": metrics})

    @register(Dispatch.RANK_ZERO)
    def num_parameters(self) -> int:
        """Number of actor parameters (for MFU)."""
        from verl.workers.sharding import num_parameters

        return num_parameters(self.actor.module)

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, out_dir: str) -> None:
        """Write actor weights, optimizer and LR-scheduler state to ``out_dir`` (rank 0 writes)."""
        from verl.workers.sharding import save_worker_state

        save_worker_state(self.actor.module, self.actor.optimizer, self.actor.scheduler, out_dir)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, in_dir: str) -> None:
        """Restore `save_checkpoint`'s files (any world size) and refresh the rollout weights."""
        from verl.workers.sharding import load_worker_state

        load_worker_state(self.actor.module, self.actor.optimizer, self.actor.scheduler, in_dir)
        self.rollout.sync_weights(self.actor.module, force=True)


class CriticWorker(Worker):
    """The value model: computes values and updates them (PPO with GAE).

    Args:
        config: the ``critic`` section (finalized: model path, mini batch resolved).
        rollout_n: ``actor_rollout_ref.rollout.n`` (mini-batches count prompts).
    """

    def __init__(self, config: CriticConfig, rollout_n: int = 1, seed: int = 1, device: str = "cpu") -> None:
        super().__init__(device)
        self.config, self.rollout_n, self.seed = config, rollout_n, seed

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self, total_training_steps: int) -> None:
        """Load the value model, optimizer and LR schedule."""
        from verl.modules import create_model
        from verl.workers.sharding import shard_module

        cfg = self.config
        torch.manual_seed(self.seed)
        module = shard_module(create_model("critic", cfg.model, device=self.device), cfg.model.fsdp_config, self.world_size)
        optimizer = build_optimizer(module, cfg.optim)
        self.critic = PPOCritic(module, optimizer, build_lr_scheduler(optimizer, cfg.optim, total_training_steps), cfg, self.world_size)
        self.mini_batch_size = _per_rank(cfg.ppo_mini_batch_size * self.rollout_n, self.world_size, "critic.ppo_mini_batch_size * rollout.n")

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` `(B, R)`."""
        micro = self.config.forward_micro_batch_size_per_gpu or self.config.ppo_micro_batch_size_per_gpu
        return DataProto.from_dict(tensors={"values": self.critic.compute_values(data, micro)})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One RL step of value updates; metrics in ``meta_info["metrics"]``."""
        metrics = self.critic.update_critic(data, self.mini_batch_size, self.config.ppo_micro_batch_size_per_gpu)
        return DataProto(meta_info={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, out_dir: str) -> None:
        """Write critic weights, optimizer and LR-scheduler state to ``out_dir``."""
        from verl.workers.sharding import save_worker_state

        save_worker_state(self.critic.module, self.critic.optimizer, self.critic.scheduler, out_dir)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, in_dir: str) -> None:
        """Restore `save_checkpoint`'s files (any world size)."""
        from verl.workers.sharding import load_worker_state

        load_worker_state(self.critic.module, self.critic.optimizer, self.critic.scheduler, in_dir)


class RewardModelWorker(Worker):
    """A sequence-classification reward model scoring (prompt + response).

    The score is placed on the last valid response token of ``rm_scores`` `(B, R)`. It reuses
    the policy's token ids, so the reward model must share the policy's tokenizer
    (``reward_model.model.input_tokenizer`` re-templating is not supported and is refused).

    Args:
        config: the ``reward_model`` section.
    """

    def __init__(self, config: Any, device: str = "cpu") -> None:
        super().__init__(device)
        self.config = config
        if config.model.input_tokenizer:
            raise ValueError("reward_model.model.input_tokenizer (a reward model with another tokenizer) is not supported")

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the frozen reward model."""
        from verl.modules import create_model
        from verl.workers.sharding import shard_module

        self.module = shard_module(create_model("reward_model", self.config.model, device=self.device),
                                   self.config.model.fsdp_config, self.world_size)

    @register(Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` `(B, R)`: the sequence score on the last valid response token."""
        from verl.modules.forward import compute_rm_scores

        b = data.batch
        micro = self.config.micro_batch_size_per_gpu or len(data)
        scores = torch.cat([
            compute_rm_scores(self.module, *(m.batch[k].to(self.device) for k in ("input_ids", "attention_mask", "position_ids"))).cpu()
            for m in data.split(micro)
        ])
        mask = b["response_mask"]
        last = (torch.arange(mask.shape[1]) * mask.long()).argmax(dim=-1)
        rm_scores = torch.zeros(mask.shape, dtype=torch.float32)
        has_tokens = mask.sum(-1) > 0
        rm_scores[torch.arange(len(data))[has_tokens], last[has_tokens]] = scores[has_tokens]
        return DataProto.from_dict(tensors={"rm_scores": rm_scores})
