"""Typed config of the supervised trainers (``verl sft``, ``verl dpo``, hybrid): verl's SFT keys.

Key paths follow verl's ``sft_trainer.yaml`` (``data.*``, ``model.partial_pretrain``,
``optim.*``, ``trainer.*``) so that verl's SFT scripts run unchanged; ``dpo.*`` holds the
preference loss and ``hybrid.tasks`` the task streams of ``trainer.algorithm=hybrid`` (the
product documents' ``algorithm: hybrid`` with ``task_weights``). Each field is documented once,
right under it. Loading (unknown keys with did-you-mean, one-line errors) is
`verl.config.sft_loader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from verl.config.schema import CustomRewardFunctionConfig


@dataclass
class SFTMultiTurnConfig:
    enable: bool = False
    # Rows are chat conversations (row[messages_key]); the loss covers exactly the assistant turns.
    messages_key: str = "messages"
    # Column holding the list of {role, content} messages.
    tools_key: Optional[str] = "tools"
    # Column holding tool schemas for the chat template (absent column = no tools; a JSON string is parsed).
    enable_thinking_key: Optional[str] = None
    # Column whose per-row value is passed to the chat template as enable_thinking (absent = the default below).
    enable_thinking_default: Optional[bool] = None
    # enable_thinking for rows without that column; None = not passed to the template.
    apply_chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments of tokenizer.apply_chat_template (every turn boundary is rendered with them).


@dataclass
class CustomClsConfig:
    path: Optional[str] = None
    # A custom dataset class file: not supported (must stay null).
    name: Optional[str] = None


@dataclass
class SFTDataConfig:
    train_batch_size: int = 256
    # Sequences (DPO: pairs) per optimizer step, global over all ranks.
    micro_batch_size: Optional[int] = None
    # Deprecated global micro batch; micro_batch_size_per_gpu = micro_batch_size / world size.
    micro_batch_size_per_gpu: int = 4
    # Sequences per forward/backward per rank (also the validation batch). Never changes the loss.
    use_dynamic_bsz: bool = False
    # Pack micro-batches by a token budget (max_token_len_per_gpu) instead of micro_batch_size_per_gpu.
    max_token_len_per_gpu: int = 8192
    # Tokens (prompt + response) per micro-batch per rank with use_dynamic_bsz. Never changes the loss.
    train_max_samples: int = -1
    # Use only the first N training rows; -1 = all.
    val_max_samples: int = -1
    # Use only the first N validation rows; -1 = all.
    train_files: List[str] = field(default_factory=lambda: ["~/data/gsm8k/train.parquet"])
    # Parquet / JSONL files, or builtin://arithmetic_sft/train, builtin://arithmetic_preference/<split>.
    val_files: List[str] = field(default_factory=list)
    # Validation files (same format); empty = no validation loss.
    prompt_key: str = "question"
    # Column of the prompt (text, or a dict read through prompt_dict_keys; DPO: text or messages).
    response_key: str = "answer"
    # Column of the response (text, or a dict read through response_dict_keys).
    prompt_dict_keys: List[str] = field(default_factory=lambda: ["question"])
    # Nested keys followed when the prompt column holds a dict (verl's extra_info layout).
    response_dict_keys: List[str] = field(default_factory=lambda: ["answer"])
    # Nested keys followed when the response column holds a dict.
    chosen_key: str = "chosen"
    # DPO: column of the preferred answer (text or messages).
    rejected_key: str = "rejected"
    # DPO: column of the dispreferred answer.
    multiturn: SFTMultiTurnConfig = field(default_factory=SFTMultiTurnConfig)
    max_length: int = 1024
    # Tokens per sequence (prompt + response) at most.
    truncation: str = "error"
    # Longer sequences: error | left (keep the end) | right (keep the start).
    balance_dp_token: bool = False
    # Not supported (must stay false): the loss already uses the global token count.
    chat_template: Optional[str] = None
    # A Jinja chat template replacing the tokenizer's.
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    shuffle: bool = True
    # Shuffle rows each epoch (seeded by trainer.seed and the epoch number).


@dataclass
class SFTFSDPConfig:
    model_dtype: str = "fp32"
    # Parameter dtype: fp32 | bf16.
    wrap_policy: Dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    # FSDP2 wraps every transformer block; accepted for verl's scripts (only min_num_params: 0).
    cpu_offload: bool = False
    # Keep parameters and optimizer state on CPU between uses (FSDP2 CPUOffloadPolicy).
    offload_params: bool = False
    # Keep parameters on CPU between uses (verl's second spelling of cpu_offload; also offloads the optimizer).
    optimizer_offload: bool = False
    # Keep only the optimizer state on CPU.
    mixed_precision: Optional[str] = None
    # Compute dtype (bfloat16 | float32) over parameters in model_dtype; None = model_dtype.


@dataclass
class SFTModelConfig:
    strategy: str = "fsdp2"
    # Training engine: fsdp | fsdp2 (both mean the FSDP2 engine; a plain module with one rank).
    partial_pretrain: str = "~/models/gemma-1.1-7b-it"
    # Causal LM directory (or builtin://tiny-arithmetic) the training starts from.
    tokenizer_path: Optional[str] = None
    # Tokenizer directory; None = partial_pretrain.
    fsdp_config: SFTFSDPConfig = field(default_factory=SFTFSDPConfig)
    external_lib: Optional[str] = None
    # Python module imported before the model is built.
    enable_gradient_checkpointing: bool = False
    # Recompute activations in backward.
    trust_remote_code: bool = False
    lora_rank: int = 0
    # LoRA rank; 0 = full fine-tuning. The output directory holds the merged model.
    lora_alpha: int = 16
    target_modules: Any = "all-linear"
    # LoRA targets: all-linear or a list of module names.
    use_liger: bool = False
    # Not supported (must stay false).
    exclude_modules: Optional[str] = None
    # LoRA: regex (full match) of module names never adapted; no effect when lora_rank=0.
    override_config: Dict[str, Any] = field(default_factory=dict)
    # Keys overriding the model's HF config.


@dataclass
class SFTOptimConfig:
    lr: float = 1e-5
    # Peak learning rate (AdamW).
    betas: List[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.01
    eps: float = 1e-8
    warmup_steps_ratio: float = 0.1
    # Linear warm-up length as a fraction of the total optimizer steps.
    lr_warmup_steps: Optional[int] = None
    # Warm-up length in steps; overrides warmup_steps_ratio when set.
    clip_grad: float = 1.0
    # Max global gradient L2 norm; a non-finite norm skips the step.
    lr_scheduler: str = "cosine"
    # After warm-up: cosine (to min_lr_ratio * lr at the last step) | constant.
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    # Cosine cycles over the decay phase (0.5 = half a cosine down to min_lr_ratio * lr).
    zero_indexed_step: bool = False
    # True: update k (1-based) uses the schedule at k - 1, so the first warm-up update runs at lr 0 (verl's
    # engine layout default); False: at k (the first warm-up update at lr / warmup steps).


@dataclass
class DPOConfig:
    beta: float = 0.1
    # KL strength β of DPO / IPO (Rafailov et al. 2023; Azar et al. 2023).
    loss_type: str = "sigmoid"
    # sigmoid (DPO; cDPO with label_smoothing) | ipo.
    label_smoothing: float = 0.0
    # cDPO ε in [0, 0.5): probability that a preference label is flipped.
    reference: str = "auto"
    # auto: LoRA runs use the actor with adapters off, full fine-tuning a frozen copy | copy.


@dataclass
class HybridTaskConfig:
    name: str = "sft"
    # Task name: metrics are logged as hybrid/<name>/*.
    loss: str = "sft"
    # sft (SFT rows) | dpo (preference pairs) | rl (prompts: GRPO on sampled responses).
    train_files: List[str] = field(default_factory=list)
    # The stream's own data files (same formats as data.train_files; rl: verl RL rows).
    batch_size: int = 8
    # Rows (sft), pairs (dpo) or prompts (rl) this stream contributes to every optimizer step.
    micro_batch_size_per_gpu: Optional[int] = None
    # Forward/backward chunk; None = data.micro_batch_size_per_gpu.
    rollout_n: int = 4
    # rl: responses sampled per prompt (GRPO group size, ≥ 2).
    response_length: int = 8
    # rl: max new tokens per response.
    temperature: float = 1.0
    # rl: sampling temperature; old log-probs and the loss score logits / temperature (as the RL trainer).
    clip_ratio: float = 0.2
    # rl: PPO clip epsilon (one update per sample, so the ratio is 1 at the step).
    logprob_chunk_size: int = 1024
    # rl: as actor.logprob_chunk_size: rows of logits turned into log-probs at once (old log-probs and loss).
    reward_manager: str = "naive"
    # rl: registered reward manager, as reward_model.reward_manager (naive | batch | dapo | prime | ...).
    reward_timeout_s: float = 30.0
    # rl: as reward_model.timeout_s: seconds a scorer may take per sample; over it the score is 0 and counted.
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    # rl: as custom_reward_function.{path,name,reward_kwargs}; path None = built-in scorers routed by data_source.


@dataclass
class HybridConfig:
    tasks: List[HybridTaskConfig] = field(default_factory=list)
    # The task streams, in the order of trainer.task_weights.


@dataclass
class SFTTrainerConfig:
    algorithm: str = "sft"
    # sft | dpo | hybrid (several task streams, see hybrid.tasks).
    task_weights: List[float] = field(default_factory=list)
    # hybrid: weight w_i of each task's loss, normalised to sum 1; empty = equal weights.
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    # Checkpoints: global_step_N/ (a Hugging Face model + tokenizer at its top, engine state in actor/).
    default_hdfs_dir: Optional[str] = None
    # Not supported (must stay null): copy checkpoints with your own tools.
    output_dir: str = "outputs/${trainer.project_name}/${trainer.experiment_name}"
    # Resolved config and metrics.jsonl.
    resume_mode: str = "auto"
    # auto (latest valid checkpoint in default_local_dir) | disable | resume_path.
    resume_from_path: Optional[str] = None
    # Checkpoint for resume_mode=resume_path.
    resume_path: Optional[str] = None
    # verl's older spelling of resume_from_path (implies resume_mode=resume_path).
    project_name: str = "gsm8k-sft"
    experiment_name: str = "test"
    total_epochs: int = 4
    # Passes over the training data (hybrid: over the first task's stream).
    total_training_steps: Optional[int] = None
    # Optimizer steps; None = epochs x steps per epoch.
    logger: List[str] = field(default_factory=lambda: ["console"])
    # console | jsonl | tensorboard | wandb | mlflow.
    seed: int = 1
    # Seed of model init-time randomness and the data shuffle.
    save_freq: Any = -1
    # Checkpoint every N steps (and at the end); -1 = only at the end; after_each_epoch = every epoch.
    test_freq: Any = -1
    # Validation loss every N steps (and at the end); -1 = only at the end when val_files are set;
    # after_each_epoch = every epoch.
    nnodes: int = 1
    n_gpus_per_node: int = 1
    # The world size comes from torchrun (WORLD_SIZE), as in verl's SFT trainer; a mismatch is logged.
    max_ckpt_to_keep: Optional[int] = None
    # Keep at most this many checkpoints; None = all.
    device: str = "cpu"
    # cpu | cuda.


@dataclass
class SFTCheckpointConfig:
    save_contents: List[str] = field(default_factory=lambda: ["model", "optimizer", "extra", "hf_model"])
    # What global_step_N holds: model (weights, needed to resume) | optimizer | extra (lr scheduler) |
    # hf_model (a Hugging Face directory at its top). verl's sft_trainer_engine layout defaults to
    # [model, optimizer, extra].
    load_contents: List[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    # What a resume restores (model is required; a part the checkpoint lacks starts fresh).


@dataclass
class SFTRootConfig:
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)
    checkpoint: SFTCheckpointConfig = field(default_factory=SFTCheckpointConfig)
    ulysses_sequence_parallel_size: int = 1
    # Ulysses sequence parallelism (trainer.algorithm=sft): groups of this many ranks share a data shard and
    # split each packed sequence; data parallel = world / sp. Needs use_remove_padding=true.
    use_remove_padding: bool = False
    # Padding-free forward: each micro-batch's real tokens packed into rows with per-sequence
    # position ids (verl.modules.packing.pack_targets); same losses up to float rounding, no
    # compute on padding. False as in verl's SFT trainer config.
