"""Schema sections of verl's reference PPO config: checkpoint engine, profiling, reward, Ray.

verl's ``ppo_trainer.yaml`` has 507 leaf keys; a verl user's script may set any of them. The
fields here take effect (what each key does is tabled in :mod:`verl.config.compat.verl_keys`);
verl's keys of these sections that have no effect here are not fields but rows of
:mod:`verl.config.compat.verl_inert`, accepted at load.

Defaults are verl's (``verl/trainer/config/_generated_ppo_trainer.yaml``), except where noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


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
class FilterGroupsConfig:
    """DAPO dynamic sampling (``algorithm.filter_groups``; Yu et al. 2025, arXiv 2503.14476)."""

    enable: bool = False
    # Keep only prompt groups whose ``metric`` varies across the group's rollout.n samples.
    metric: Optional[str] = None
    # Per-sample value compared within a group: acc | score | seq_reward | seq_final_reward, or
    # any numeric key the scorer returns; None = seq_final_reward.
    max_num_gen_batches: int = 0
    # Generation batches tried per step before giving up (error); 0 = no limit.


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
class RayKwargsConfig:
    """Arguments of ``ray.init`` and the Ray timeline dump (``ray_kwargs``)."""

    ray_init: Dict[str, Any] = field(default_factory=lambda: {"num_cpus": None})
    # Keyword arguments of ray.init (num_cpus, runtime_env, ...); null values are dropped.


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
