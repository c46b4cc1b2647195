"""The canonical configuration schema: one typed dataclass per section, verl's key paths.

This module is the single source of truth for every key, its default, unit and meaning (each
field is documented once, in the comment right under it). YAML presets in
``verl/config/presets/`` hold only differences from these defaults; dotted command-line
overrides (``a.b=c``) are applied on top (see :mod:`verl.config.loader`).

Defaults follow verl's ``ppo_trainer.yaml`` for every algorithm hyper-parameter. The data and
model paths default to the built-in quick-start task and tiny model (``builtin://...``), so the
default config is runnable with no download.

Batch-size units: ``data.train_batch_size`` and ``*.ppo_mini_batch_size`` count
*prompts* (global); trajectories per step = prompts x ``rollout.n``;
``*_micro_batch_size_per_gpu`` counts *trajectories* per device (per worker process on CPU) per
forward/backward; ``use_dynamic_bsz`` packs micro-batches by a token budget instead.

Only keys that act here are fields. verl's keys that have no effect here (speed or memory options
that compute the same values, settings of engines and features the product lacks) are not: the
compat table :mod:`verl.config.compat.verl_inert` accepts them at load at verl's defaults (or at
any value, for a documented no-op) and drops them before this schema is built. The rollout
sections live in :mod:`verl.config.schema_rollout`; verl's checkpoint-engine, profiler, reward and
Ray sections in :mod:`verl.config.compat.schema_verl`; the run guards, attestation, distillation
and V1 trainer sections in their own ``schema_*`` modules; what each key of verl's reference
config does here is tabled in :mod:`verl.config.compat.verl_keys`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from verl.config.schema_guards import AlarmsConfig, SentinelConfig
from verl.config.schema_distill import DistillationConfig
from verl.config.schema_attest import SyncCheckConfig  # noqa: F401 (re-exported: config/checks.py uses S.SyncCheckConfig)
from verl.config.schema_v1 import TrainerV1Config
from verl.config.schema_rollout import AgentLoopConfig, MultiTurnConfig, RolloutConfig, SamplingConfig  # noqa: F401 (re-exported: callers use S.<Class>)
from verl.config.compat.schema_verl import (
    CustomClassConfig,
    FilterGroupsConfig,
    GlobalProfilerConfig,
    RayKwargsConfig,
    RewardManagerSection,
    VerlRewardConfig,
)


# --------------------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    tokenizer: Optional[str] = None
    # Tokenizer path; None = the actor model's tokenizer.
    train_files: List[str] = field(default_factory=lambda: ["builtin://arithmetic/train"])
    # Parquet/JSONL files in verl's RL schema, or ``builtin://<task>/<split>`` for a built-in task.
    val_files: List[str] = field(default_factory=lambda: ["builtin://arithmetic/test"])
    # Validation files, same format. Empty list = no validation.
    prompt_key: str = "prompt"
    # Column holding the chat messages (list of {role, content}).
    reward_fn_key: str = "data_source"
    # Column that routes each sample to its reward scorer.
    max_prompt_length: int = 512
    # Tokens. Longer prompts are filtered (filter_overlong_prompts) or truncated (truncation).
    max_response_length: int = 512
    # Tokens generated at most per response; also the Dr.GRPO constant L of seq-mean-token-sum-norm.
    train_batch_size: int = 1024
    # Prompts per RL step (global). Trajectories per step = train_batch_size x rollout.n.
    val_batch_size: Optional[int] = None
    # Prompts per validation generation batch; None = the whole validation set at once.
    return_raw_chat: bool = False
    # Keep the raw chat messages in non_tensor_batch["raw_prompt"] (needed by multi-turn rollouts).
    shuffle: bool = True
    # Shuffle training prompts each epoch (seeded by data.seed).
    seed: int = 1
    # Seed of the training-data shuffle.
    drop_last: bool = True
    # Drop the last incomplete training batch of each epoch.
    filter_overlong_prompts: bool = False
    # Drop prompts longer than max_prompt_length when the dataset is built.
    truncation: str = "error"
    # What to do with an overlong prompt that is not filtered: error | left | right | middle.
    trust_remote_code: bool = False
    # Allow custom tokenizer code from the tokenizer directory.
    dataloader_num_workers: int = 0
    # Worker processes of the training DataLoader.
    apply_chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments for tokenizer.apply_chat_template.
    max_samples: int = -1
    # Use at most this many training AND validation samples each (first N); -1 = all.
    train_max_samples: int = -1
    # Use at most this many training samples (first N); -1 = all; overrides max_samples.
    val_max_samples: int = -1
    # Use at most this many validation samples (first N); -1 = all; overrides max_samples.
    gen_batch_size: Optional[int] = None
    # Prompts per generation batch under algorithm.filter_groups (DAPO); None = train_batch_size.
    return_full_prompt: bool = False
    # Keep the templated prompt text in non_tensor_batch["full_prompts"].
    validation_shuffle: bool = False
    # Shuffle the validation set (seeded by data.seed).
    custom_cls: CustomClassConfig = field(default_factory=CustomClassConfig)
    # Dataset class replacing the built-in RL dataset: cls(data_files, tokenizer, config, processor).
    tool_config_path: Optional[str] = None
    # Tool config file (verl's tool YAML) whose schemas filter_overlong_prompts renders with each prompt
    # (apply_chat_template(..., tools=...), as a tool agent loop sends it): prompts longer than
    # max_prompt_length with the tools are filtered; the kept prompt ids are rendered without them.
    # No effect without filter_overlong_prompts. None = rollout.multi_turn.tool_config_path (verl's default).


# ------------------------------------------------------------------------------ model / optim
@dataclass
class ModelConfig:
    path: str = "builtin://tiny-arithmetic"
    # Local directory or hub id of a causal LM; ``builtin://tiny-arithmetic`` = the built-in model.
    tokenizer_path: Optional[str] = None
    # Tokenizer directory; None = same as path.
    trust_remote_code: bool = False
    # Allow custom modelling code from the model directory (off by default: it runs code).
    dtype: str = "float32"
    # Parameter dtype of the trained model: float32 | bfloat16 (never float16 on CPU).
    enable_gradient_checkpointing: bool = False
    # Recompute activations in backward to save memory.
    use_remove_padding: bool = True
    # Padding-free training forwards (verl's default): the real tokens of a micro-batch packed into
    # one row with per-sequence position ids (verl.modules.packing); actor, reference, critic and
    # old-log-prob recompute. False = padded (B, T) forwards.
    lora_rank: int = 0
    # LoRA rank; 0 disables LoRA (full fine-tuning).
    lora_alpha: int = 16
    # LoRA scaling alpha (scale = alpha / rank); must be > 0 when lora_rank > 0, any value (no effect) when 0.
    target_modules: Any = "all-linear"
    # LoRA target modules: "all-linear" or a list / comma-separated string of module names.
    override_config: Dict[str, Any] = field(default_factory=dict)
    # Keys overriding the model's HF config (e.g. {"attn_implementation": "eager"}).
    external_lib: Optional[str] = None
    # Python module imported before the model is built (registers custom architectures).
    exclude_modules: Optional[str] = None
    # LoRA: regex (full match on the module's dotted name) of modules never adapted, even when target_modules
    # names them (peft's LoraConfig.exclude_modules); null = none. No effect when lora_rank=0.


@dataclass
class OptimConfig:
    lr: float = 1e-6
    # Peak learning rate.
    lr_warmup_steps: int = -1
    # Linear warm-up length in optimizer steps; -1 = use lr_warmup_steps_ratio.
    lr_warmup_steps_ratio: float = 0.0
    # Warm-up length as a fraction of total optimizer steps (used when lr_warmup_steps < 0).
    min_lr_ratio: float = 0.0
    # Cosine schedule floor as a fraction of lr.
    warmup_style: str = "constant"
    # LR schedule after warm-up: constant | cosine.
    weight_decay: float = 0.01
    # AdamW decoupled weight decay.
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    # AdamW betas.
    eps: float = 1e-8
    # AdamW epsilon.
    total_training_steps: int = -1
    # Filled in by the trainer (RL steps: the LR schedule steps once per update call); -1 until then.
    clip_grad: float = 1.0
    # verl's optim-level gradient clip (same meaning as actor.grad_clip / critic.grad_clip).
    num_cycles: float = 0.5
    # Cosine cycles over the decay phase (0.5 = half a cosine down to min_lr_ratio).
    lr_scheduler_type: str = "constant"
    # constant | cosine; warmup_style is its deprecated alias.
    zero_indexed_step: bool = False
    # true: the first update uses the schedule at step 0 (verl's YAML default); false: at step 1.


@dataclass
class FSDPConfig:
    param_offload: bool = False
    # Keep parameters on CPU between uses (CPUOffloadPolicy; pin_memory=False on CPU).
    optimizer_offload: bool = False
    # Keep optimizer state on CPU.
    reshard_after_forward: bool = True
    # FSDP2 reshard_after_forward (ZeRO-3 like when True).
    mixed_precision: Optional[str] = None
    # Compute dtype for FSDP2 MixedPrecisionPolicy (bfloat16 | float32); None = parameter dtype.
    fsdp_size: int = -1
    # Sharding group size; -1 = all ranks.
    offload_policy: bool = False
    # FSDP2 CPUOffloadPolicy for parameters, gradients and optimizer state.
    tensor_parallel_size: int = 1
    # Tensor-parallel degree of the actor / critic (verl's torchtitan-engine key): decoder blocks split over
    # groups of this many ranks, FSDP2 over world / tp (verl/workers/sharding/tensor_parallel.py); the ref keeps 1.
    # With the role's ulysses_sequence_parallel_size sp > 1 the mesh is (dp, sp, tp): sp x tp divides the world,
    # data parallel = world / (sp x tp), heads / tp and kv_heads / tp divisible by sp.


@dataclass
class CheckpointContentConfig:
    save_contents: List[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    # What a checkpoint holds: model | optimizer | extra (scheduler, RNG) | hf_model.
    load_contents: List[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    # What is restored on resume.


@dataclass
class PolicyLossConfig:
    loss_mode: str = "vanilla"
    # Policy loss: vanilla | gspo | gpg | cispo | clip_cov | kl_cov | sapo | geo_mean | dppo_tv | dppo_kl |
    # dro | bypass_mode (verl's formulas; sapo reads actor.tau_pos / tau_neg; geo_mean's clip_ratio_low
    # / high bound the log ratio; dppo_*'s are divergence thresholds and clip_ratio_c truncates the
    # importance weight). sapo and geo_mean aggregate their policy-gradient term seq-mean-token-mean
    # whatever loss_agg_mode says, as verl does.
    clip_cov_ratio: float = 0.0002
    # clip_cov: fraction of tokens whose gradient is detached.
    clip_cov_lb: float = 1.0
    # clip_cov: lower bound of the covariance window.
    clip_cov_ub: float = 5.0
    # clip_cov: upper bound of the covariance window.
    kl_cov_ratio: float = 0.0002
    # kl_cov: fraction of tokens that get the KL penalty.
    ppo_kl_coef: float = 0.1
    # kl_cov: coefficient of that KL penalty.
    dro_beta: Optional[float] = None
    # dro: beta of the quadratic log-ratio penalty beta/2 (log pi - log pi_old)^2; required (> 0)
    # with loss_mode=dro.


@dataclass
class ActorConfig:
    strategy: str = "fsdp2"
    # Training engine: fsdp2 (a plain module when the world size is 1).
    ppo_mini_batch_size: int = 256
    # Prompts per optimizer step (global); x rollout.n trajectories. Must divide train_batch_size.
    ppo_micro_batch_size: Optional[int] = None
    # Deprecated global micro batch; use ppo_micro_batch_size_per_gpu (setting both is an error).
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per forward/backward per device; None = the whole per-rank mini-batch.
    use_dynamic_bsz: bool = False
    # Pack micro-batches by token budget (ppo_max_token_len_per_gpu) instead of a fixed count.
    ppo_max_token_len_per_gpu: int = 16384
    # Token budget (prompt + response) of one micro-batch under use_dynamic_bsz.
    grad_clip: float = 1.0
    # Max global gradient L2 norm; a non-finite norm skips the step (counted).
    clip_ratio: float = 0.2
    # PPO clip epsilon (used when clip_ratio_low/high are None).
    clip_ratio_low: Optional[float] = 0.2
    # Lower clip epsilon: ratio >= 1 - clip_ratio_low; >= 0. A value >= 1 (verl's CISPO scripts set 10) puts
    # no lower bound on the (positive) ratio.
    clip_ratio_high: Optional[float] = 0.2
    # Upper clip epsilon (DAPO clip-higher): ratio <= 1 + clip_ratio_high.
    clip_ratio_c: float = 3.0
    # Dual-clip constant for negative advantages (Ye et al. 2020); must be > 1.
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    # Policy-loss variant and its parameters.
    loss_agg_mode: str = "token-mean"
    # token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm.
    loss_scale_factor: Optional[float] = None
    # Constant L of seq-mean-token-sum-norm; None = data.max_response_length.
    entropy_coeff: float = 0.0
    # Weight of the entropy bonus (loss -= entropy_coeff * entropy).
    use_kl_loss: bool = False
    # Add beta * KL(actor || ref) to the loss (GRPO style); needs the reference policy.
    kl_loss_coef: float = 0.001
    # Beta of the KL loss.
    kl_loss_type: str = "low_var_kl"
    # KL estimator of the KL loss: kl|k1 | abs | mse|k2 | low_var_kl|k3, and the "+" variants.
    ppo_epochs: int = 1
    # Passes over each step's data.
    shuffle: bool = False
    # Shuffle trajectories before splitting into mini-batches.
    data_loader_seed: Optional[int] = None
    # Seed of that shuffle (one generator per update call, verl/workers/actor.py); None = 0, not trainer.seed.
    optim: OptimConfig = field(default_factory=OptimConfig)
    # AdamW and LR schedule.
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    # FSDP2 sharding and offload.
    checkpoint: CheckpointContentConfig = field(default_factory=CheckpointContentConfig)
    # Checkpoint contents.
    logprob_chunk_size: int = 1024
    # Rows of logits turned into log-probs at once (bounds the fp32 (N, V) log-softmax memory);
    # also the row chunk of the fused LM head + log-prob (verl.algorithms.logprob_head).
    logprob_head_recompute: bool = False
    # Fused LM head only (plain transformers models, world size 1): recompute each chunk's logits in
    # backward instead of keeping the update's (K, V) float32 logits. Peak memory O(chunk x V)
    # instead of K x V, for one more LM-head matmul (measured ≈ 10-25 % slower on the GSM8K shape).
    rollout_n: Optional[int] = None
    # verl mirrors rollout.n here; None = rollout.n (another value is an error).
    tau_pos: float = 1.0
    # SAPO soft-gate temperature for positive advantages (loss_mode=sapo).
    tau_neg: float = 1.05
    # SAPO soft-gate temperature for negative advantages.
    calculate_entropy: bool = False
    # Compute the policy entropy in the update (metric actor/entropy) although entropy_coeff is 0;
    # entropy_coeff != 0 always computes it. Off: the update's log-prob forward skips the entropy pass.
    top_entropy_quantile: float = 1.0
    # ρ in (0, 1] (TRL's GRPOConfig name; verl has no key): only the ρ fraction of response tokens
    # with the highest policy entropy in each mini-batch (all ranks) keep their policy-gradient
    # loss (Wang et al. 2025, "Beyond the 80/20 Rule", arXiv 2506.01939; the paper uses 0.2).
    # Threshold = the (1 - ρ) quantile (linear interpolation) of the entropies from one extra
    # no-grad forward per mini-batch; the entropy and KL terms and every loss denominator keep all
    # response tokens (token-mean divides by all of them, as the paper's objective). 1.0 = off.
    # Metric actor/top_entropy_threshold.
    mask_truncated_completions: bool = False
    # Leave responses cut at the length limit (all response_length slots filled, last token not an
    # EOS id) out of the actor loss: their response_mask is zeroed after advantages and the critic
    # update, so they still count in group baselines, and the loss denominators count only the
    # remaining tokens (TRL's GRPOConfig mask_truncated_completions; DAPO's overlong filtering,
    # Yu et al. 2025, arXiv 2503.14476). verl has no key. Metric response_length/masked_truncated_ratio.
    reuse_old_log_probs: bool = True
    # When the update is exactly on-policy (ppo_epochs 1, one mini-batch per step, no in-reward KL),
    # skip the old-log-prob forward: old_log_probs = the update forward's own log-probs, detached
    # (first PPO ratio exactly 1). False = always recompute. See verl.workers.actor.reuses_old_log_probs.
    ulysses_sequence_parallel_size: int = 1
    # Ulysses sequence parallelism (DeepSpeed-Ulysses): groups of this many ranks split each packed sequence
    # and exchange attention heads by all-to-all; data parallel = world / sp (batch checks use it). Must divide
    # the world and the model's attention and KV heads; needs model.use_remove_padding (config/sp_checks.py).
    use_remove_padding: Optional[bool] = None
    # verl mirrors model.use_remove_padding here; None = model.use_remove_padding.
    calculate_sum_pi_squared: bool = False
    # Compute sum_v pi(v)^2 per response token in the old-log-prob stage (one extra no-grad forward),
    # batch key sum_pi_squared; required by, and only allowed with, the optimal token baselines.


@dataclass
class RefConfig:
    log_prob_micro_batch_size: Optional[int] = None
    # Deprecated global micro batch for reference log-probs.
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per reference forward per device; None = all at once.
    log_prob_use_dynamic_bsz: bool = False
    # Token-budget micro-batches for the reference forward.
    log_prob_max_token_len_per_gpu: int = 16384
    # Token budget (prompt + response) of one reference forward micro-batch under log_prob_use_dynamic_bsz.
    fsdp_config: FSDPConfig = field(default_factory=lambda: FSDPConfig(param_offload=False))
    # Reference model sharding / offload.
    rollout_n: Optional[int] = None
    # verl's copy of rollout.n for the reference; None = rollout.n (another value is an error).
    strategy: Optional[str] = None
    # verl mirrors actor.strategy here; None = actor.strategy.
    ulysses_sequence_parallel_size: int = 1
    # 1: the reference forward sees whole sequences on each rank; the actor's value: split like the actor's.


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True
    # true: actor, rollout and reference share one process and one copy of the weights.
    # false: the rollout engine runs in its own worker group (on Ray its own resource pool of
    # rollout.nnodes x rollout.n_gpus_per_node devices; locally a second in-process worker) with
    # its own weights, streamed from the actor after every update in buckets of
    # rollout.checkpoint_engine.update_weights_bucket_megabytes.
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


# -------------------------------------------------------------------------------------- critic
@dataclass
class CriticModelConfig(ModelConfig):
    """The value model: the actor's `ModelConfig` fields (same meanings) plus its sharding."""

    path: Optional[str] = None
    # Critic initialisation; None = the actor's model path (value head freshly initialised).
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    # Critic sharding / offload.


@dataclass
class CriticConfig:
    enable: Optional[bool] = None
    # Use a critic; None = only when algorithm.adv_estimator needs one (gae).
    strategy: str = "fsdp2"
    # Training engine of the value model: fsdp2 (a plain module when the world size is 1).
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: Optional[int] = None
    # Prompts per critic optimizer step; None = actor.ppo_mini_batch_size.
    ppo_micro_batch_size: Optional[int] = None
    # Deprecated global micro batch.
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per forward/backward per device; None = whole per-rank mini-batch.
    use_dynamic_bsz: bool = False
    # Pack the critic's micro-batches by token budget (ppo_ / forward_max_token_len_per_gpu) instead of a count.
    ppo_max_token_len_per_gpu: int = 32768
    # Token budget (prompt + response) of one critic update micro-batch under use_dynamic_bsz.
    forward_micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per value forward (no grad); None = ppo_micro_batch_size_per_gpu.
    forward_max_token_len_per_gpu: int = 32768
    # Token budget of one value forward (no grad) micro-batch under use_dynamic_bsz.
    ppo_epochs: int = 1
    # Critic passes over each step's data.
    shuffle: bool = False
    # Draw the critic's mini-batches from a fresh seeded permutation of the step's trajectories each
    # epoch (as actor.shuffle); false keeps the input order.
    grad_clip: float = 1.0
    # Max global gradient L2 norm of the critic update; a non-finite norm skips the step (counted).
    cliprange_value: float = 0.5
    # Value clipping range around the old values.
    loss_agg_mode: str = "token-mean"
    # Aggregation of the value loss: token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm.
    checkpoint: CheckpointContentConfig = field(default_factory=CheckpointContentConfig)
    placement: str = "colocated"
    # Ray backend: colocated (rank r shares the actor's device/process slot) | separate (own pool).
    rollout_n: Optional[int] = None
    # verl's copy of rollout.n for the critic; None = rollout.n (another value is an error).
    data_loader_seed: Optional[int] = None
    # Seed of the critic.shuffle permutations (one generator per update call, verl/workers/critic.py);
    # None = 0, not trainer.seed.
    forward_micro_batch_size: Optional[int] = None
    # Deprecated global micro batch of the value forward.
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    # verl's engine spelling of model.fsdp_config (both hold the same values, config/compat/verl_layout.py).
    ulysses_sequence_parallel_size: int = 1
    # The critic's Ulysses sequence parallelism (as actor.ulysses_sequence_parallel_size; needs
    # critic.model.use_remove_padding).


# -------------------------------------------------------------------------------------- reward
@dataclass
class RewardModelModelConfig:
    path: Optional[str] = None
    # Sequence-classification reward model directory.
    input_tokenizer: Optional[str] = None
    # Tokenizer of the policy, when the RM's tokenizer differs (responses are re-templated).
    trust_remote_code: bool = False
    # Allow custom modelling code from the reward model directory.
    dtype: str = "float32"
    # Parameter dtype of the reward model: float32 | bfloat16.
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class OverlongBufferConfig:
    enable: bool = False
    # DAPO overlong reward shaping.
    len: int = 0
    # Buffer length in tokens: penalty grows over the last `len` tokens before max_response_length.
    penalty_factor: float = 1.0
    # Penalty at max_response_length.
    log: bool = False
    # Log the penalty as a metric.


@dataclass
class RewardModelConfig:
    enable: bool = False
    # Score with a reward model (in addition to / instead of rule scorers).
    strategy: str = "fsdp2"
    # Engine of the reward model's forward: fsdp2 (a plain module when the world size is 1).
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per reward-model forward per device; None = all at once.
    micro_batch_size: Optional[int] = None
    # Deprecated global micro batch, turned into micro_batch_size_per_gpu by finalize.
    use_dynamic_bsz: bool = False
    # Pack the reward-model forward's micro-batches by token budget (forward_max_token_len_per_gpu
    # real tokens each, as the actor's use_dynamic_bsz) instead of micro_batch_size_per_gpu rows.
    forward_max_token_len_per_gpu: int = 32768
    # Token budget (prompt + response, padding excluded) of one reward-model micro-batch under use_dynamic_bsz.
    reward_manager: str = "naive"
    # Rule-reward manager: naive (per sample) | batch.
    timeout_s: float = 30.0
    # Seconds a scorer may take per sample; over it the score is 0 and counted.
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    placement: str = "colocated"
    # Ray backend: colocated with the actor | separate (its own resource pool).
    reward_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Keyword arguments passed to every reward-function call (verl's reward_model.reward_kwargs).
    enable_resource_pool: bool = False
    # Give the reward model its own resource pool (nnodes x n_gpus_per_node).
    num_workers: Optional[int] = None
    # Scoring threads of streaming rewards (verl's reward.num_workers; >= 1; None = 8, verl's default).
    streaming: bool = True
    # Score each trajectory as soon as the rollout finishes it, while the others still generate
    # (sync step and separate_async rollout; verl.trainer.ppo.streaming_reward): the same scores, extra
    # info and failure counts as scoring after generation. Streams with the in-process (local
    # backend) hf engine and agent loops, the naive / dapo / gdpo managers (rule scorers, custom
    # compute_score) and a reward model on its own pool (placement=separate); otherwise, and with
    # false, the batch is scored after generation.


@dataclass
class CustomRewardFunctionConfig:
    path: Optional[str] = None
    # Python file defining the scorer (compute_score); None = built-in scorers routed by data_source.
    name: str = "compute_score"
    # Function name in that file: compute_score(data_source, solution_str, ground_truth, extra_info).
    reward_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments of every compute_score call (verl's custom_reward_function.reward_kwargs).


# ----------------------------------------------------------------------------------- algorithm
@dataclass
class KLControlConfig:
    type: str = "fixed"
    # fixed | adaptive (Ziegler et al. 2019).
    kl_coef: float = 0.001
    # Initial / fixed KL coefficient beta.
    horizon: int = 10000
    # Adaptive controller horizon, in trajectories.
    target_kl: float = 0.1
    # Adaptive controller target KL (per-sequence mean of the per-token KL, nats).


@dataclass
class RolloutCorrectionConfig:
    """verl's ``algorithm.rollout_correction``: correct for π_rollout ≠ π_train (needs rollout_log_probs)."""

    rollout_is: Optional[str] = None
    # Truncated importance-sampling weights min(pi_train/pi_rollout, C) on the policy loss:
    # null (off) | token | sequence.
    rollout_is_threshold: Any = 2.0
    # C, the upper bound of the weights (> 0).
    rollout_rs: Optional[str] = None
    # Rejection of units whose ratio leaves [low, high]: null (off) | token_k1 | seq_sum_k1 | seq_mean_k1.
    rollout_rs_threshold: Any = None
    # "low_high" (e.g. "0.5_2.0") or a single high (low = 1/high); required with rollout_rs.
    rollout_is_batch_normalize: bool = False
    # Rescale the IS weights to mean 1 over the batch (tokens, or sequences at sequence level).
    bypass_mode: bool = False
    # true: rollout_log_probs stand in for old_log_probs and the actor uses verl's bypass_mode loss
    # (verl.algorithms.policy_loss_bypass), which applies rollout_rs / rollout_is per micro-batch
    # to pi_theta vs pi_rollout. actor.policy_loss.loss_mode must then be vanilla (verl replaces it).
    loss_type: str = "ppo_clip"
    # Bypass-mode loss: ppo_clip (PPO clip, its ratio pi_theta/pi_rollout is the IS ratio) |
    # reinforce (-sg[w] A log pi_theta, w the truncated IS weight of rollout_is, 1 when off).


@dataclass
class AlgorithmConfig:
    gamma: float = 1.0
    # Discount factor.
    lam: float = 1.0
    # GAE lambda.
    adv_estimator: str = "gae"
    # gae | grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax | opo | gpg | grpo_passk
    # | grpo_vectorized | rloo_vectorized | gdpo (verl's formulas, verl.algorithms.group_advantages_verl).
    # | optimal_token_baseline | tir_optimal_token_baseline (need actor.calculate_sum_pi_squared=true,
    # not with rollout_correction.rollout_is; the old log-probs are then always recomputed).
    norm_adv_by_std_in_grpo: bool = True
    # GRPO: divide by the group std; False = Dr.GRPO. verl's rloo ignores it, and so does ours.
    norm_adv_by_std_in_rloo: bool = False
    # rloo only (not a verl key; verl's rloo never scales): A_i = (s_i - mean of the other
    # samples) / (unbiased group std + 1e-6), the leave-one-out baseline with std scaling of
    # NeMo-RL / TRL's RLOO option. Singletons keep their raw score. True with another
    # adv_estimator is an error.
    gdpo_reward_keys: List[str] = field(default_factory=list)
    # gdpo (required there): the reward components, keys of the reward function's per-sample extra
    # info (a compute_score returning a dict); each is GRPO-normalised in its group on its own,
    # then weighted, summed and whitened over the batch. Set with another adv_estimator: an error.
    gdpo_reward_weights: Optional[List[float]] = None
    # gdpo: one weight per gdpo_reward_keys entry (finite); None = all 1.
    use_kl_in_reward: bool = False
    # Subtract beta * KL(actor || ref) from token rewards (needs the reference policy).
    kl_penalty: str = "kl"
    # Estimator of the in-reward KL: kl|k1 | abs | mse|k2 | low_var_kl|k3.
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    # DAPO dynamic sampling.
    rollout_correction: RolloutCorrectionConfig = field(default_factory=lambda: RolloutCorrectionConfig())
    # Rollout/training mismatch correction (truncated importance sampling, rejection).


# ------------------------------------------------------------------------------------- trainer
@dataclass
class TrainerConfig:
    project_name: str = "verl"
    # Tracking project; also the first level of the default output and checkpoint directories.
    experiment_name: str = "default"
    # Run name; a config file without one is named after the file (see load_config).
    logger: List[str] = field(default_factory=lambda: ["console", "jsonl"])
    # Any of console | jsonl | tensorboard | wandb | mlflow.
    log_val_generations: int = 0
    # Validation samples printed per validation.
    total_epochs: int = 1
    # Passes over the training data.
    total_training_steps: Optional[int] = None
    # RL steps; None = epochs x batches per epoch.
    nnodes: int = 1
    # Nodes; the world size is nnodes x n_gpus_per_node.
    n_gpus_per_node: int = 1
    # Devices per node; with device=cpu, worker processes per node.
    device: str = "cpu"
    # cpu | cuda.
    backend: str = "auto"
    # Worker-group backend: local | ray | auto (local when the world size is 1, ray otherwise).
    balance_batch: bool = True
    # Reorder trajectories so every data-parallel rank gets a similar token count.
    seed: int = 1
    # Seed of model init, sampling and mini-batch shuffles.
    val_before_train: bool = True
    # Validate before the first step.
    val_only: bool = False
    # Validate and exit.
    test_freq: int = -1
    # Validate every N steps and after the last one; -1 = never during training (as verl; val_before_train
    # still validates before the first step).
    save_freq: int = -1
    # Checkpoint every N steps (and at the end); -1 = never.
    critic_warmup: int = 0
    # Steps that update only the critic.
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    # Checkpoint root; global_step_N/ directories live here.
    output_dir: str = "outputs/${trainer.project_name}/${trainer.experiment_name}"
    # Run outputs: resolved config, metrics.jsonl, TensorBoard events, plots.
    resume_mode: str = "auto"
    # auto | disable | resume_path.
    resume_from_path: Optional[str] = None
    # Checkpoint directory (global_step_N) for resume_mode=resume_path.
    max_actor_ckpt_to_keep: Optional[int] = None
    # Keep at most this many actor checkpoints; None = all.
    max_critic_ckpt_to_keep: Optional[int] = None
    # Keep at most this many critic checkpoints; None = all.
    save_hf: bool = False
    # Also write a Hugging Face model directory beside each checkpoint.
    progress_bar: bool = True
    # Show a progress bar with the step's key numbers.
    plot: bool = True
    # Write a PNG plot of reward and accuracy over steps at the end.
    rollout_data_dir: Optional[str] = None
    # Directory for each step's trajectories as <step>.jsonl (prompt, response, turns, tool calls,
    # score, score details) and <step>.tokens.npz (token ids and pieces, response_mask, rollout and
    # training log-probs, entropy, advantages), read by `verl view DIR`; None = not written. Set,
    # it makes the old-log-prob forward run on every step (the dump needs its log-probs and entropy).
    rollout_data_max_rows: Optional[int] = None
    # At most this many trajectories per step in those dumps (>= 1), whole groups of a prompt
    # first in batch order; None = every trajectory.
    hang_timeout_s: Optional[float] = None
    # Hang watchdog floor F in seconds: a worker-group call is hung after max(F, 10 x the slowest
    # earlier call of that method on as many rows, the first call left out once there are others),
    # a first call after 10 x F; then every worker's stack is dumped and the run exits (status 3).
    # None = on Ray F = 300 for first calls and 30 afterwards, off on the local backend
    # (breakpoints); 0 = off.
    validation_data_dir: Optional[str] = None
    # Write each validation's generations as <dir>/<step>.jsonl.
    del_local_ckpt_after_load: bool = False
    # Delete the local checkpoint directory after resuming from it.
    v1: TrainerV1Config = field(default_factory=TrainerV1Config)
    # verl's trainer modes (sync | separate_async) and replay-buffer sampler (see verl.config.schema_v1).
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)
    # Live reward-hacking alarms (alarm/* metrics; see verl.config.schema_guards).
    sentinel: SentinelConfig = field(default_factory=SentinelConfig)
    # Divergence sentinel, incident bundles for `verl replay`, rollback (see verl.config.schema_guards).


@dataclass
class RootConfig:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    reward_manager: RewardManagerSection = field(default_factory=RewardManagerSection)
    # verl's new-style reward-manager section.
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
    # Controller-side profiling.
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    # ray.init arguments.
    reward: VerlRewardConfig = field(default_factory=VerlRewardConfig)
    # verl's reward namespace; migrated onto reward_model / custom_reward_function (config/compat/reward_layout.py).
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    # On-policy distillation from a teacher model (off by default; see verl.config.schema_distill).

    @property
    def model(self) -> ModelConfig:
        """The actor's model section (``actor_rollout_ref.model``), as the seed API names it."""
        return self.actor_rollout_ref.model
