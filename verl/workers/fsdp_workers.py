"""Workers for each model role: `ActorRolloutRefWorker` (hybrid engine) and `CriticWorker`.

The same classes run under `LocalWorkerGroup` (world size 1: plain modules, the rollout uses
the actor's module directly, no copy) and `RayWorkerGroup` (one process per device: modules
sharded with FSDP2 ``fully_shard``). Every model sits in a `verl.engine` training engine (the
frozen ones in an engine without optimizer); the actor and critic add only their losses. Each
method is declared with its dispatch mode; the trainer never sees ranks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.engine import FSDPTrainingEngine, MicroBatchSpec, build_engine
from verl.workers.actor import PPOActor, compute_log_prob, compute_sum_pi_squared
from verl.workers.critic import PPOCritic
from verl.workers.sharding.tensor_parallel import build_layout, build_rollout_layout, shard_kwargs
from verl.workers.sync_attest_worker import ActorAttestMixin
from verl.workers.weight_stream import WeightStream

if TYPE_CHECKING:
    from verl.config.schema import ActorRolloutRefConfig, CriticConfig


def build_reference_engine(
    ref: torch.nn.Module, fsdp: Any, layout: Any, ref_sp: bool, ref_tp: bool, world_size: int, device: str = "cpu"
) -> FSDPTrainingEngine:
    """The frozen reference policy's engine.

    Args:
        ref: the reference model (unsharded, frozen).
        fsdp: ``ref.fsdp_config``.
        layout: the actor's layout (`build_layout`).
        ref_sp: the reference's Ulysses degree equals the actor's (> 1): Ulysses attention only,
            FSDP2 over the whole world.
        ref_tp: ``ref.fsdp_config.tensor_parallel_size`` > 1 (equal to the actor's, checked at
            load time): the actor's whole layout (TP plan, and its Ulysses split when ``sp > 1``),
            FSDP2 over the actor's data-parallel dims; its forwards run through ``layout.run``.

    Returns:
        An inference-only `FSDPTrainingEngine`.
    """
    if ref_tp:
        layout.prepare(ref)
        return build_engine(ref, fsdp, **shard_kwargs(layout, world_size), device=device)
    if ref_sp:  # split like the actor's forwards (Ulysses only: whole projections)
        layout.prepare_reference(ref)
    return build_engine(ref, fsdp, world_size, device=device)


def _per_rank(global_size: int, dp_size: int, what: str) -> int:
    if global_size % dp_size:
        raise ValueError(f"{what}={global_size} is not divisible by the data-parallel size {dp_size}")
    return global_size // dp_size


class ActorRolloutRefWorker(ActorAttestMixin, Worker):
    """Actor, rollout and reference policy in one process, sharing one copy of the weights.

    With ``hybrid_engine=false`` no rollout engine is built here: the rollout is a
    `verl.workers.rollout_worker.RolloutWorker` group, and this worker streams its weights to it
    bucket by bucket (`begin_weight_stream`, `next_weight_bucket`; driven by
    `verl.trainer.ppo.split_rollout.SplitActorRollout`).

    Args:
        config: the ``actor_rollout_ref`` section (finalized: rollout lengths resolved).
        use_reference: build the reference policy (needed by ``use_kl_loss`` / ``use_kl_in_reward``).
        seed: seed of weight init and sampling.
        device: ``cpu`` or ``cuda`` (``trainer.device``).
    """

    def __init__(
        self, config: ActorRolloutRefConfig, use_reference: bool = False, seed: int = 1, device: str = "cpu"
    ) -> None:
        super().__init__(device)
        self.config, self.use_reference, self.seed = config, use_reference, seed
        self.actor: PPOActor | None = None
        self.actor_engine: FSDPTrainingEngine | None = None
        self.ref_engine: FSDPTrainingEngine | None = None
        self.rollout: Any = None  # stays None with hybrid_engine=false
        self._stream = WeightStream()  # the weight stream in progress (hybrid_engine=false)

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self, total_training_steps: int) -> None:
        """Load actor (+ reference), build optimizer, LR schedule and (hybrid engine) the rollout engine."""
        import copy

        from verl.modules import create_model, load_tokenizer
        from verl.workers.rollout import build_rollout_engine
        from verl.workers.rollout.agent_loop import wrap_rollout_engine
        from verl.workers.rollout_sync import SyncedRollout

        cfg = self.config
        torch.manual_seed(self.seed)
        module = create_model("actor", cfg.model, device=self.device)
        # sharded actor: the hf rollout generates with an unsharded copy (see rollout_sync); other
        # engines hold their own weights and only read the actor's config here
        in_place = cfg.rollout.name == "hf"
        shared = self.world_size == 1 or not in_place or not cfg.hybrid_engine
        rollout_module = module if shared else copy.deepcopy(module).requires_grad_(False)
        # data parallel x Ulysses SP and / or x TP (verl.workers.sharding); the rollout copy keeps whole sequences
        self.sp = build_layout(
            cfg.actor.ulysses_sequence_parallel_size,
            cfg.actor.fsdp_config.tensor_parallel_size,
            self.world_size,
            self.device,
        )
        self.ref_sp = cfg.ref.ulysses_sequence_parallel_size == self.sp.sp > 1
        self.ref_tp = cfg.ref.fsdp_config.tensor_parallel_size > 1  # the actor's TP degree (tp_checks)
        self.sp.prepare(module)
        self.actor_engine = build_engine(
            module,
            cfg.actor.fsdp_config,
            **shard_kwargs(self.sp, self.world_size),
            optim=cfg.actor.optim,
            total_steps=total_training_steps,
            grad_clip=cfg.actor.grad_clip,
            device=self.device,
        )
        self.actor = PPOActor(self.actor_engine, cfg.actor, remove_padding=cfg.model.use_remove_padding)
        if self.use_reference and cfg.model.lora_rank == 0:
            ref = create_model("ref", cfg.model, device=self.device).requires_grad_(False)
            self.ref_engine = build_reference_engine(
                ref, cfg.ref.fsdp_config, self.sp, self.ref_sp, self.ref_tp, self.world_size, self.device
            )
        self.mini_batch_size = _per_rank(
            cfg.actor.ppo_mini_batch_size * cfg.rollout.n, self.sp.dp, "ppo_mini_batch_size * rollout.n"
        )
        if (
            not cfg.hybrid_engine
        ):  # the rollout lives in its own worker group (RolloutWorker), fed by next_weight_bucket
            return
        tokenizer = load_tokenizer(
            cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code
        )
        self.rollout_tp = build_rollout_layout(cfg.rollout, self.world_size, self.device)  # hf TP decode, or None
        if self.rollout_tp is not None:
            self.rollout_tp.prepare(rollout_module)
        engine = wrap_rollout_engine(
            build_rollout_engine(rollout_module, cfg.rollout, tokenizer), cfg.rollout, tokenizer
        )
        self.rollout = SyncedRollout(
            engine, shared=self.world_size == 1 and in_place, sync_check=cfg.rollout.sync_check
        )
        if not in_place:  # the engine starts from the actor's config only: give it the weights
            self.rollout.sync_weights(self.actor_engine, force=True)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Responses for ``prompts`` (already repeated ``rollout.n`` times by the trainer).

        Raises:
            RuntimeError: ``hybrid_engine=false`` (the rollout is another worker group).
        """
        if self.rollout is None:
            raise RuntimeError(
                "hybrid_engine=false: this actor has no rollout engine; generate on the RolloutWorker group"
            )
        start = time.perf_counter()
        self.rollout.sync_weights(self.actor_engine)
        with self.actor_engine.on_device():  # world size 1 generates with the actor's own weights
            tp = getattr(self, "rollout_tp", None)  # hf TP: the group decodes its ranks' prompts together
            out = (
                tp.run(prompts, self.rollout.generate_sequences)
                if tp is not None
                else self.rollout.generate_sequences(prompts)
            )
        metrics = out.meta_info.setdefault("metrics", {})
        metrics["timing_s/generate_sequences"] = time.perf_counter() - start
        return out

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` `(B, R)` under the rollout temperature."""
        return self.sp.run(data, self._compute_log_prob)

    def _compute_log_prob(self, data: DataProto) -> DataProto:
        r = self.config.rollout
        micro = MicroBatchSpec(
            r.log_prob_micro_batch_size_per_gpu, r.log_prob_use_dynamic_bsz, r.log_prob_max_token_len_per_gpu
        )
        log_probs, entropy = compute_log_prob(
            self.actor_engine,
            data,
            r.temperature,
            micro,
            calculate_entropy=True,
            chunk_size=self.config.actor.logprob_chunk_size,
            remove_padding=self.config.model.use_remove_padding,
        )
        out = {"old_log_probs": log_probs, "entropys": entropy}
        if self.config.actor.calculate_sum_pi_squared:  # the optimal token baselines read it
            out["sum_pi_squared"] = compute_sum_pi_squared(
                self.actor_engine, data, r.temperature, micro, self.config.actor.logprob_chunk_size
            )
        return DataProto.from_dict(tensors=out)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` `(B, R)`: the frozen reference policy (or the actor with LoRA disabled).

        ``ref.ulysses_sequence_parallel_size`` equal to the actor's, or ``ref.fsdp_config.
        tensor_parallel_size`` > 1: split like the actor's forwards; otherwise each rank computes
        its own rows with whole sequences. The LoRA reference is the
        actor's own module, so under TP it runs like the actor's forwards (its TP group on the same rows).
        """
        split = self.ref_sp or self.ref_tp or (self.ref_engine is None and getattr(self.sp, "tp", 1) > 1)
        return self.sp.run(data, self._compute_ref_log_prob) if split else self._compute_ref_log_prob(data)

    def _compute_ref_log_prob(self, data: DataProto) -> DataProto:
        from verl.modules import ref_policy_context

        r, ref_cfg = self.config.rollout, self.config.ref
        micro = MicroBatchSpec(
            ref_cfg.log_prob_micro_batch_size_per_gpu,
            ref_cfg.log_prob_use_dynamic_bsz,
            ref_cfg.log_prob_max_token_len_per_gpu,
        )
        kw = {
            "chunk_size": self.config.actor.logprob_chunk_size,
            "remove_padding": self.config.model.use_remove_padding,
        }
        if self.ref_engine is not None:
            log_probs, _ = compute_log_prob(self.ref_engine, data, r.temperature, micro, **kw)
        else:
            with ref_policy_context(self.actor_engine.module):
                log_probs, _ = compute_log_prob(self.actor_engine, data, r.temperature, micro, **kw)
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs})

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One RL step of PPO updates; metrics in ``meta_info["metrics"]``."""
        start = time.perf_counter()
        with self.sp.scope():  # SP: the group's rows on each of its ranks, sequences split
            metrics = self.actor.update_policy(
                self.sp.gather(data), self.config.rollout.temperature, self.mini_batch_size
            )
        metrics["timing_s/update_actor_worker"] = time.perf_counter() - start
        if self.rollout is not None:
            # the syncs of the weights this step generated with (see SyncedRollout.take_unreported_sync_s)
            metrics["timing_s/update_weights"] = self.rollout.take_unreported_sync_s()
            # the largest whole tensor a sync gathered beyond this rank's shard (in-place syncs)
            metrics["perf/update_weights_peak_extra_mb"] = self.rollout.sync_stats.get("peak_extra_bytes", 0.0) / 2**20
            metrics.update(self.rollout.take_sync_metrics())  # weight-sync attestation (verl.workers.sync_attest)
            self.rollout.mark_stale()
        return DataProto(meta_info={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def begin_weight_stream(self, trainable_only: bool) -> tuple[int, int]:
        """Start streaming the weights to a separate rollout (`next_weight_bucket`).

        Args:
            trainable_only: send only parameters with ``requires_grad`` (after the first full sync).

        Returns:
            ``(tensors, buckets)`` of this stream; the caller asks for exactly ``buckets`` buckets
            (``rollout.checkpoint_engine.update_weights_bucket_megabytes`` each, `WeightStream.start`).
        """
        from verl.workers.rollout.weight_sync import bucket_bytes_of

        self._stream = WeightStream.start(
            self.actor_engine.module, trainable_only, bucket_bytes_of(self.config.rollout)
        )
        return self._stream.tensors, self._stream.buckets

    @register(Dispatch.ONE_TO_ALL)
    def next_weight_bucket(self) -> list[tuple[str, torch.Tensor]]:
        """The next bucket of full tensors of the stream `begin_weight_stream` planned.

        Every rank joins the gathers (FSDP2); rank 0 returns the bucket (CPU tensors), the other
        ranks an empty list.

        Raises:
            RuntimeError: every planned bucket was already sent.
        """
        with self.actor_engine.on_device():
            return self._stream.next(self.actor_engine.module, keep=self.rank == 0)

    @register(Dispatch.RANK_ZERO)
    def num_parameters(self) -> int:
        """Number of actor parameters (for MFU)."""
        return self.actor_engine.num_parameters()

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, out_dir: str) -> None:
        """Write actor weights, optimizer and LR-scheduler state to ``out_dir`` (rank 0 writes)."""
        self.actor_engine.save(out_dir)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, in_dir: str) -> None:
        """Restore `save_checkpoint`'s files (any world size) and refresh the rollout weights."""
        self.actor_engine.load(in_dir)
        if self.rollout is not None:  # a separate rollout is re-synced by its driver (split_rollout)
            self.rollout.sync_weights(self.actor_engine, force=True)


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

        cfg = self.config
        torch.manual_seed(self.seed)
        self.sp = build_layout(
            cfg.ulysses_sequence_parallel_size, cfg.model.fsdp_config.tensor_parallel_size, self.world_size, self.device
        )
        module = create_model("critic", cfg.model, device=self.device)
        self.sp.prepare(module)
        self.engine = build_engine(
            module,
            cfg.model.fsdp_config,
            **shard_kwargs(self.sp, self.world_size),
            optim=cfg.optim,
            total_steps=total_training_steps,
            grad_clip=cfg.grad_clip,
            device=self.device,
        )
        self.critic = PPOCritic(self.engine, cfg)
        self.mini_batch_size = _per_rank(
            cfg.ppo_mini_batch_size * self.rollout_n, self.sp.dp, "critic.ppo_mini_batch_size * rollout.n"
        )

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` `(B, R)`."""
        return self.sp.run(data, lambda d: DataProto.from_dict(tensors={"values": self.critic.compute_values(d)}))

    @register(Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One RL step of value updates; metrics in ``meta_info["metrics"]``."""
        with self.sp.scope():  # SP: the group's rows on each of its ranks, sequences split
            metrics = self.critic.update_critic(self.sp.gather(data), self.mini_batch_size)
        return DataProto(meta_info={"metrics": metrics})

    @register(Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, out_dir: str) -> None:
        """Write critic weights, optimizer and LR-scheduler state to ``out_dir``."""
        self.engine.save(out_dir)

    @register(Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, in_dir: str) -> None:
        """Restore `save_checkpoint`'s files (any world size)."""
        self.engine.load(in_dir)


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
            raise ValueError(
                "reward_model.model.input_tokenizer (a reward model with another tokenizer) is not supported"
            )

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the frozen reward model."""
        from verl.modules import create_model

        self.engine = build_engine(
            create_model("reward_model", self.config.model, device=self.device),
            self.config.model.fsdp_config,
            self.world_size,
            device=self.device,
        )

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` `(B, R)`: the sequence score on the last valid response token."""
        from verl.modules.forward import compute_rm_scores

        def forward(module: torch.nn.Module, m: DataProto) -> dict[str, torch.Tensor]:
            device = next(module.parameters()).device
            return {
                "scores": compute_rm_scores(
                    module, *(m.batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids"))
                )
            }

        c = self.config  # use_dynamic_bsz: micro-batches packed by forward_max_token_len_per_gpu tokens, as the actor's
        micro = MicroBatchSpec(c.micro_batch_size_per_gpu, c.use_dynamic_bsz, c.forward_max_token_len_per_gpu)
        scores = self.engine.infer_batch(data, forward, micro)["scores"]
        mask = data.batch["response_mask"]
        last = (torch.arange(mask.shape[1]) * mask.long()).argmax(dim=-1)
        rm_scores = torch.zeros(mask.shape, dtype=torch.float32)
        has_tokens = mask.sum(-1) > 0
        rm_scores[torch.arange(len(data))[has_tokens], last[has_tokens]] = scores[has_tokens]
        return DataProto.from_dict(tensors={"rm_scores": rm_scores})
