"""Sections of verl's reference PPO config that hold engine, profiler or hardware settings.

verl's ``ppo_trainer.yaml`` has 507 leaf keys; a verl user's script may set any of them. The
sections here exist so that every such key is *known* (no "unknown key" for a verl key). What
each field does here is stated once, in :mod:`verl.config.compat.verl_keys`'s machine-readable table:
a field either takes effect, is a documented no-op (with verl's meaning), or raises
"`<key>` is not supported yet: <what to do>" when set to anything but its default.

Defaults are verl's (``verl/trainer/config/_generated_ppo_trainer.yaml``), except where noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class ProfilerConfig:
    """verl's per-role profiler section (``*.profiler``); see compat table."""

    tool: Optional[str] = None
    # nsys | npu | torch | torch_memory; None = no profiler.
    enable: bool = False
    # Profile this role.
    all_ranks: bool = False
    # Profile every rank (else ``ranks``).
    ranks: List[int] = field(default_factory=list)
    # Ranks to profile.
    save_path: Optional[str] = None
    # Directory of the traces.
    tool_config: Dict[str, Any] = field(default_factory=dict)
    # Per-tool options (nsys / npu / torch / torch_memory sub-mappings).
    relocate_results: bool = False
    # Move the traces to save_path when the run ends.
    finish_hook_cmd: Optional[str] = None
    # Shell command run on the traces when profiling ends.
    finish_hook_all_ranks: bool = False
    # Run the hook on every rank (else finish_hook_ranks).
    finish_hook_ranks: List[int] = field(default_factory=list)
    # Ranks that run the hook.


@dataclass
class GlobalProfilerConfig:
    """verl's ``global_profiler`` section (controller-side profiling)."""

    tool: Optional[str] = None
    # nsys | npu | torch | torch_memory; None = no profiler.
    steps: Optional[List[int]] = None
    # Steps to profile.
    profile_continuous_steps: bool = False
    # Merge consecutive profiled steps into one trace.
    save_path: str = "outputs/profile"
    # Directory of the traces.
    relocate_results: bool = False
    # Move the traces to save_path when the run ends.
    finish_hook_cmd: Optional[str] = None
    # Shell command run on the traces when profiling ends.
    finish_hook_all_ranks: bool = False
    # Run the hook on every rank (else finish_hook_ranks).
    finish_hook_ranks: List[int] = field(default_factory=list)
    # Ranks that run the hook.
    global_tool_config: Dict[str, Any] = field(default_factory=dict)
    # Per-tool options (nsys controller/worker options, torch_memory).


@dataclass
class RouterReplayConfig:
    """MoE router replay (``*.router_replay``)."""

    mode: str = "disabled"
    # disabled | record | replay.
    record_file: Optional[str] = None
    # Where recorded routing decisions are written.
    replay_file: Optional[str] = None
    # Routing decisions to replay.


@dataclass
class WrapPolicyConfig:
    """FSDP auto-wrap policy."""

    min_num_params: int = 0
    # Wrap modules with at least this many parameters; 0 = wrap transformer blocks.


@dataclass
class FusedKernelOptions:
    impl_backend: str = "torch"
    # Fused kernel backend: torch | triton.


@dataclass
class TiledMLPConfig:
    enabled: bool = False
    # Compute the MLP in tiles over the sequence to save activation memory.
    num_shards: int = 4
    # Number of tiles.


@dataclass
class MTPConfig:
    """Multi-token prediction (``model.mtp``)."""

    enable: bool = False
    # Load the model's MTP layers.
    enable_train: bool = False
    # Train the MTP layers.
    enable_rollout: bool = False
    # Speculative decoding with the MTP layers.
    detach_encoder: bool = False
    # Stop the MTP loss gradient at the encoder.
    mtp_loss_scaling_factor: float = 0.1
    # Weight of the MTP loss.
    speculative_algorithm: str = "EAGLE"
    # Speculative algorithm of the rollout engine.
    speculative_num_steps: int = 3
    # Draft steps.
    speculative_eagle_topk: int = 1
    # EAGLE top-k.
    speculative_num_draft_tokens: int = 4
    # Draft tokens per step.
    method: str = "mtp"
    # Speculative method name of the engine.
    num_speculative_tokens: int = 1
    # Speculative tokens per step.


@dataclass
class CheckpointEngineConfig:
    """How updated weights reach the rollout engine (``rollout.checkpoint_engine``)."""

    backend: str = "naive"
    # naive (the only one): in the worker's process when colocated; buckets through the controller
    # (Ray's object store on Ray) with hybrid_engine=false.
    update_weights_bucket_megabytes: int = 2048
    # MiB of one weight-sync bucket (> 0): vLLM colocated and hybrid_engine=false; a tensor larger
    # than a bucket travels alone. The colocated hf engine has no buckets (verl_keys.CONDITIONAL).
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Options of verl's other backends; must stay empty (naive takes none).
    custom_backend_module: Optional[str] = None
    # Module registering a user checkpoint-engine backend; None = the built-in ones.


@dataclass
class TraceConfig:
    """Rollout tracing (``rollout.trace``)."""

    backend: Optional[str] = None
    # weave | mlflow; None = off.
    token2text: bool = False
    # Decode token ids in traces.
    max_samples_per_step_per_worker: Optional[int] = None
    # Traces per step and worker.
    project_name: Optional[str] = None
    # Trace project (verl: trainer.project_name).
    experiment_name: Optional[str] = None
    # Trace experiment (verl: trainer.experiment_name).


@dataclass
class PrometheusConfig:
    """Rollout-server Prometheus metrics (``rollout.prometheus``)."""

    enable: bool = False
    # Export server metrics.
    port: int = 9090
    # Prometheus port.
    file: str = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    # Prometheus config file.
    served_model_name: Optional[str] = None
    # Model name in the metrics.


@dataclass
class CustomClassConfig:
    """A user class named by file path and class name (verl's ``custom_cls`` style)."""

    path: Optional[str] = None
    # Python file (or importable module) defining the class; None = built-in.
    name: Optional[str] = None
    # Class (or function) name in that file.


@dataclass
class SamplerConfig:
    """Custom training-data sampler (``data.sampler``)."""

    class_path: Optional[str] = None
    # Python file / module of the sampler class; None = the built-in (seeded) shuffle.
    class_name: Optional[str] = None
    # Sampler class name.


@dataclass
class FilterGroupsConfig:
    """DAPO dynamic sampling (``algorithm.filter_groups``; Yu et al. 2025, arXiv 2503.14476)."""

    enable: bool = False
    # Keep only prompt groups whose ``metric`` varies across the group's rollout.n samples.
    metric: Optional[str] = None
    # Per-sample value compared within a group: acc | score | seq_reward | seq_final_reward, or
    # any numeric key the scorer returns; None = seq_final_reward.
    max_num_gen_batches: int = 0
    # Generation batches tried per step before giving up (error); 0 = no limit.
    max_inflight_gen_batches: int = 1
    # Generation batches in flight at once (verl overlaps them); 1 = one after the other.


@dataclass
class PFPPOConfig:
    """Policy-filtration PPO reweighting (``algorithm.pf_ppo``)."""

    reweight_method: str = "pow"
    # pow | max_min | max_random.
    weight_pow: float = 2.0
    # Exponent of the pow method.


@dataclass
class RewardManagerModuleConfig:
    path: Optional[str] = None
    # Python file defining a custom reward manager class.
    name: str = "custom_reward_manager"
    # Class name in that file.


@dataclass
class RewardManagerSection:
    """verl's new-style top-level ``reward_manager`` section."""

    source: str = "register"
    # register = look ``name`` up in the registry | importlib = load ``module``.
    name: str = "naive"
    # Registered manager name (same registry as reward_model.reward_manager).
    module: RewardManagerModuleConfig = field(default_factory=RewardManagerModuleConfig)
    # Custom manager class when source=importlib.


@dataclass
class SandboxFusionConfig:
    """Remote code-execution sandbox for code rewards."""

    url: Optional[str] = None
    # Sandbox endpoint; None = no sandbox.
    max_concurrent: int = 64
    # Concurrent sandbox requests.
    memory_limit_mb: int = 1024
    # Memory limit per execution.


@dataclass
class RMRolloutConfig:
    """Generative reward model serving (``reward_model.rollout``); all None = not used."""

    name: Optional[str] = None
    dtype: Optional[str] = None
    gpu_memory_utilization: Optional[float] = None
    enforce_eager: Optional[bool] = None
    cudagraph_capture_sizes: Optional[List[int]] = None
    free_cache_engine: Optional[bool] = None
    data_parallel_size: Optional[int] = None
    expert_parallel_size: Optional[int] = None
    tensor_model_parallel_size: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    load_format: Optional[str] = None
    engine_kwargs: Optional[Dict[str, Any]] = None
    limit_images: Optional[int] = None
    enable_chunked_prefill: Optional[bool] = None
    enable_prefix_caching: Optional[bool] = None
    disable_log_stats: Optional[bool] = None
    skip_tokenizer_init: Optional[bool] = None
    prompt_length: Optional[int] = None
    response_length: Optional[int] = None
    # Serving settings of a generative reward model (vllm / sglang), verl's names.


@dataclass
class TransferQueueConfig:
    enable: bool = False
    # verl's TransferQueue data plane.
    metrics: Dict[str, Any] = field(default_factory=lambda: {"enabled": False, "port": 0})
    # TransferQueue metrics endpoint (read only with enable=true).
    backend: Dict[str, Any] = field(default_factory=dict)
    # TransferQueue storage backend options (read only with enable=true).


@dataclass
class RayKwargsConfig:
    """Arguments of ``ray.init`` and the Ray timeline dump (``ray_kwargs``)."""

    ray_init: Dict[str, Any] = field(default_factory=lambda: {"num_cpus": None})
    # Keyword arguments of ray.init (num_cpus, runtime_env, ...); null values are dropped.
    timeline_json_file: Optional[str] = None
    # Write ray.timeline() to this file when the run ends (Ray backend).


@dataclass
class QATConfig:
    """Quantization-aware training (verl's ``QATEngineConfig``, ``*.qat``)."""

    enable: bool = False
    # Train with fake-quantized weights.
    mode: str = "w4a16"
    # Quantization scheme.
    group_size: int = 16
    # Quantization group size.
    ignore_patterns: List[str] = field(default_factory=lambda: ["lm_head", "embed_tokens", "re:.*mlp.gate$"])
    # Modules left unquantized.
    activation_observer: str = "static_minmax"
    # Activation range observer.
    quantization_config_path: Optional[str] = None
    # Quantization config file.


@dataclass
class EngineLoRAConfig:
    """verl's engine-side LoRA section (``model.lora``; megatron / new-engine LoRA)."""

    type: str = "lora"
    # Adapter type.
    merge: bool = False
    # Merge the adapter before weight sync.
    rank: int = 0
    # Adapter rank; 0 = no engine-side LoRA (FSDP LoRA is model.lora_rank).
    alpha: int = 32
    # Adapter scale numerator.
    dropout: float = 0.0
    # Adapter dropout.
    target_modules: List[str] = field(default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])
    # Megatron module names.
    exclude_modules: List[str] = field(default_factory=list)
    # Modules without adapters.
    dropout_position: str = "pre"
    # Where dropout applies.
    lora_A_init_method: str = "xavier"
    # Init of A.
    lora_B_init_method: str = "zero"
    # Init of B.
    a2a_experimental: bool = False
    # Experimental all-to-all for expert adapters.
    dtype: Optional[str] = None
    # Adapter dtype.
    adapter_path: Optional[str] = None
    # Adapter to load.
    freeze_vision_model: bool = True
    # VLM: keep the vision model frozen.
    freeze_vision_projection: bool = True
    # VLM: keep the projection frozen.
    freeze_language_model: bool = True
    # Train only the adapter.


@dataclass
class DisaggregationConfig:
    """Prefill/decode disaggregated serving (``rollout.disaggregation``)."""

    enabled: bool = False
    # Separate prefill and decode replicas.
    prefill_replicas: int = 1
    decode_replicas: int = 1
    decode_tensor_model_parallel_size: Optional[int] = None
    transfer_backend: str = "nixl"
    bootstrap_port: Optional[int] = None
    ib_device: Optional[str] = None
    # KV-transfer settings between the replicas.


@dataclass
class SkipStageConfig:
    """One stage of verl's skip manager (``skip.<stage>``): replay a dumped stage output."""

    enable: bool = False
    # Replay this stage from dump_dir instead of running it.
    dump_dir: str = "~/.verl/rollout_dump"
    # Where stage outputs are dumped and read back.
    steps: List[int] = field(default_factory=list)
    # Steps to replay; empty = all.
    action: str = "cache"
    # cache (dump, then replay) | ...


@dataclass
class SkipConfig:
    """verl's skip manager (``skip``): replay of dumped rollouts for debugging."""

    rollout: SkipStageConfig = field(default_factory=SkipStageConfig)
    rollout_tq: SkipStageConfig = field(default_factory=SkipStageConfig)
    async_rollout: SkipStageConfig = field(default_factory=SkipStageConfig)


@dataclass
class RewardFunctionSection:
    """``reward.custom_reward_function``."""

    path: Optional[str] = None
    # Python file defining the scorer; None = built-in scorers routed by data_source.
    name: str = "compute_score"
    # Function name in that file.
    reward_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments passed to the function.


@dataclass
class RewardModelSection:
    """``reward.reward_model`` (verl's ``RewardModelConfig``)."""

    enable: bool = False
    # Score with a reward model.
    enable_resource_pool: bool = False
    # Its own resource pool.
    n_gpus_per_node: int = 8
    # Devices per node of that pool (read only with enable_resource_pool).
    nnodes: int = 0
    # Nodes of that pool.
    model_path: Optional[str] = None
    # Reward model directory.
    rollout: Dict[str, Any] = field(default_factory=dict)
    # The engine verl's reward loop serves the reward model with (no effect here: the reward-model worker scores it).


@dataclass
class VerlRewardConfig:
    """verl's ``reward`` section (``verl/trainer/config/reward/reward.yaml``).

    Its values are migrated onto the keys the product reads (``reward_model.*``,
    ``custom_reward_function.*``, ``reward_manager.*``) by :mod:`verl.config.compat.reward_layout`.
    """

    num_workers: int = 8
    # Reward-loop workers scoring in parallel (the same scores result).
    streaming: bool = True
    # Score each trajectory as soon as the rollout finishes it (the same scores); migrated onto
    # reward_model.streaming, where it is documented.
    custom_reward_function: RewardFunctionSection = field(default_factory=RewardFunctionSection)
    reward_manager: RewardManagerSection = field(default_factory=RewardManagerSection)
    reward_model: RewardModelSection = field(default_factory=RewardModelSection)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    reward_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Keyword arguments of every reward-function call (verl's DAPO settings).
