"""On-policy distillation settings (``distillation.*``), verl's keys and defaults.

verl's ``distillation/distillation.yaml`` (and the ``distillation`` section of its generated
``_generated_ppo_trainer.yaml``): off by default. When ``enabled``, a frozen teacher model (a
second model path, the student's tokenizer) scores every training rollout of the student —
log-probs of the sampled tokens, or its top-k log-probs per position — and the actor adds a
distillation loss (`verl.algorithms.distillation`); see `verl.trainer.ppo.distillation`.

``teacher_models`` maps an entry name to one teacher (:class:`TeacherModelConfig` fields); it is
free-form in the schema (verl's users add entries with ``+distillation.teacher_models.NAME.*``)
and typed and checked by :func:`resolve_teachers`. Placement: the teacher pool has
``n_gpus_per_node * nnodes`` devices; 0 (verl's default ``nnodes: 0``) puts the teachers on the
actor's devices (colocated, in the actor's process on the local backend), a positive size gives
them a pool of their own, split between teachers by ``num_replicas * per_replica_world_size``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "DistillationConfig",
    "DistillationLossConfig",
    "TeacherInferenceConfig",
    "TeacherModelConfig",
    "resolve_teachers",
]


@dataclass
class DistillationLossConfig:
    """The distillation loss (``distillation.distillation_loss``)."""

    loss_mode: str = "k3"
    # kl | k1 | abs | mse | k2 | low_var_kl | k3 (reverse-KL estimators at the sampled token) |
    # forward_kl_topk (forward KL over the teacher's top-k tokens); see verl.algorithms.distillation.
    topk: Optional[int] = 32
    # K of forward_kl_topk: teacher log-probs kept per response position (read only by top-k modes).
    use_task_rewards: bool = True
    # true: the PPO loss on the task advantages plus distillation_loss_coef x the distillation loss;
    # false: the distillation loss alone (the PPO terms, entropy and KL loss included, are dropped).
    distillation_loss_coef: float = 1.0
    # Weight of the distillation loss when use_task_rewards (1.0 is used otherwise).
    loss_max_clamp: Optional[float] = None
    # Per-token losses clamped to [-c, c] before use; null = no clamp.
    log_prob_min_clamp: Optional[float] = None
    # Lower clamp of the student's and teacher's top-k log-probs (forward_kl_topk); null = none.
    use_chunked_topk: bool = False
    # forward_kl_topk: the student's log-softmax normaliser computed chunk by chunk (same values, less memory).
    chunked_topk_chunk_size: int = 4096
    # Response positions per chunk when use_chunked_topk.
    use_policy_gradient: bool = False
    # true: the per-token loss is a negative reward, advantage = -loss, trained with the clipped
    # policy-gradient loss (verl's recipe for k1); false: the loss is backpropagated directly
    # (k3, forward_kl_topk); k1 must use the policy gradient (its gradient ignores the teacher).
    policy_loss_mode: str = "vanilla"
    # Policy loss of use_policy_gradient: vanilla (PPO clip) only, as verl.
    clip_ratio: float = 0.2
    # PPO clip ratio of the distillation policy gradient (the fallback of clip_ratio_low / high).
    clip_ratio_low: Optional[float] = 0.2
    # Lower clip ratio of the distillation policy gradient; null = clip_ratio.
    clip_ratio_high: Optional[float] = 0.2
    # Upper clip ratio of the distillation policy gradient; null = clip_ratio.


@dataclass
class TeacherInferenceConfig:
    """How one teacher is served (``teacher_models.NAME.inference``), verl's ``RolloutConfig`` keys.

    The teacher here is a forward pass of its model in a worker group (the log-probs a vLLM or
    SGLang server's ``prompt_logprobs`` return, computed directly), so the server-engine keys
    have no effect (listed in `SERVER_KEYS`); the parallel sizes set verl's replica arithmetic.
    """

    name: Optional[str] = None
    # verl's teacher engine (its default follows actor_rollout_ref.rollout.name); any engine name
    # is scored by the same forward here.
    dtype: Optional[str] = None
    # Teacher parameter dtype: float32 | bfloat16; null = actor_rollout_ref.model.dtype.
    gpu_memory_utilization: Optional[float] = 0.5
    enforce_eager: Optional[bool] = True
    cudagraph_capture_sizes: Optional[List[int]] = None
    free_cache_engine: Optional[bool] = True
    data_parallel_size: int = 1
    # Replica layout: per_replica_world_size = data x tensor x pipeline parallel sizes (verl's
    # check: the teacher pool splits into whole replicas); the teacher forward is sharded over all
    # of its ranks (FSDP2, same log-probs).
    expert_parallel_size: int = 1
    tensor_model_parallel_size: int = 2
    pipeline_model_parallel_size: int = 1
    max_num_batched_tokens: Optional[int] = 8192
    max_model_len: Optional[int] = None
    # Refused when prompt_length + response_length + 1 exceeds it (verl's check).
    max_num_seqs: Optional[int] = 1024
    # At most this many rows per teacher forward on each rank; the forwards are otherwise micro-batched
    # as the reference policy's (actor_rollout_ref.ref.log_prob_* keys).
    load_format: Optional[str] = "auto"
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)
    limit_images: Optional[int] = None
    enable_chunked_prefill: Optional[bool] = True
    enable_prefix_caching: Optional[bool] = True
    disable_log_stats: Optional[bool] = True
    skip_tokenizer_init: Optional[bool] = True
    prompt_length: Optional[int] = None
    response_length: Optional[int] = None
    # The student's lengths (verl interpolates them from actor_rollout_ref.rollout); checked
    # against max_model_len.
    temperature: Optional[float] = None
    # Not used: teacher log-probs are always at temperature 1, as verl (scoring, not sampling); another
    # value logs a warning.


SERVER_KEYS = (
    "gpu_memory_utilization",
    "enforce_eager",
    "cudagraph_capture_sizes",
    "free_cache_engine",
    "expert_parallel_size",
    "max_num_batched_tokens",
    "load_format",
    "engine_kwargs",
    "limit_images",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "disable_log_stats",
    "skip_tokenizer_init",
)
"""Inference keys of a serving engine, without effect on the teacher's forward pass."""


@dataclass
class TeacherModelConfig:
    """One teacher (``distillation.teacher_models.NAME``)."""

    key: Optional[str] = None
    # Routing key: rows whose distillation.teacher_key value equals it go to this teacher
    # (multi-teacher); a single teacher takes every row (its key becomes "default").
    model_path: Optional[str] = None
    # Causal LM directory (or builtin://NAME) of the teacher; it must share the student's vocabulary.
    num_replicas: Optional[int] = 0
    # Replicas on the teacher pool (single teacher: pool size / per_replica_world_size).
    inference: TeacherInferenceConfig = field(default_factory=TeacherInferenceConfig)

    @property
    def per_replica_world_size(self) -> int:
        """Devices of one replica: data x tensor x pipeline parallel sizes."""
        i = self.inference
        return i.tensor_model_parallel_size * i.data_parallel_size * i.pipeline_model_parallel_size

    @property
    def world_size(self) -> int:
        """Devices of this teacher on the teacher pool (0 = colocated with the actor)."""
        return int(self.num_replicas or 0) * self.per_replica_world_size


def _default_teachers() -> Dict[str, Any]:
    return {
        "teacher_model": {
            "key": None,
            "model_path": None,
            "num_replicas": 0,
            "inference": dataclasses.asdict(TeacherInferenceConfig()),
        }
    }


@dataclass
class DistillationConfig:
    """On-policy distillation (``distillation``); see the module docstring."""

    enabled: bool = False
    # Score the student's rollouts with the teacher(s) and add the distillation loss.
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    n_gpus_per_node: int = 8
    # Devices per node of the teacher pool.
    nnodes: int = 0
    # Nodes of the teacher pool; 0 = the teachers run on the actor's devices (colocated).
    teacher_models: Dict[str, Any] = field(default_factory=_default_teachers)
    # Entry name -> teacher (TeacherModelConfig keys); the default entry "teacher_model" is dropped
    # when other entries are added, as verl.
    teacher_key: str = "data_source"
    # Per-sample field (non-tensor batch key) whose value picks the teacher (multi-teacher).

    @property
    def pool_size(self) -> int:
        """Devices of the teacher pool (0 = colocated)."""
        return self.n_gpus_per_node * self.nnodes


_VERL_TARGETS = {
    TeacherModelConfig: "verl.workers.config.DistillationTeacherModelConfig",
    TeacherInferenceConfig: "verl.workers.config.RolloutConfig",
}


def _typed(cls: type, values: Any, path: str) -> Any:
    """``cls`` built from a user mapping, refusing unknown keys (``_target_`` markers are dropped)."""
    from verl.config.errors import ConfigError, did_you_mean

    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping, got {values!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for k, v in values.items():
        if k == "_target_":  # verl's marker of the class the entry instantiates
            if v != _VERL_TARGETS[cls]:
                raise ConfigError(
                    f"{path}._target_: {v!r} does not match this entry (verl writes {_VERL_TARGETS[cls]!r})"
                )
            continue
        if k not in names:
            raise ConfigError(f"unknown key '{path}.{k}'{did_you_mean(str(k), names)}")
        kwargs[k] = _typed(TeacherInferenceConfig, v, f"{path}.{k}") if k == "inference" else v
    return cls(**kwargs)


def resolve_teachers(cfg: DistillationConfig, prefix: str = "distillation") -> Dict[str, TeacherModelConfig]:
    """The configured teachers by routing key, as verl's ``DistillationConfig`` resolves them.

    One entry: it takes every row (key ``default``) and the whole pool (``num_replicas`` = pool /
    per_replica_world_size). Several: the default ``teacher_model`` entry is dropped and each
    needs its own ``key``, ``model_path`` and ``num_replicas``.

    Raises:
        ConfigError: an unknown key, a missing model_path / key, a duplicate key, or a pool that
            does not split into the teachers' replicas.
    """
    from verl.config.errors import ConfigError

    entries = {
        name: _typed(TeacherModelConfig, v, f"{prefix}.teacher_models.{name}")
        for name, v in (cfg.teacher_models or {}).items()
    }
    if len(entries) > 1:
        entries.pop("teacher_model", None)
    if not entries:
        raise ConfigError(f"{prefix}.teacher_models: distillation.enabled needs a teacher (teacher_model.model_path)")
    pool = cfg.pool_size
    if len(entries) == 1:
        ((name, only),) = entries.items()
        if pool % only.per_replica_world_size:
            raise ConfigError(
                f"{prefix}: the teacher's per_replica_world_size ({only.per_replica_world_size}) must "
                f"divide the teacher pool size (n_gpus_per_node * nnodes = {pool})"
            )
        only.num_replicas, only.key = pool // only.per_replica_world_size, "default"
    out: Dict[str, TeacherModelConfig] = {}
    for name, t in entries.items():
        path = f"{prefix}.teacher_models.{name}"
        for attr in ("model_path", "key", "num_replicas"):
            if getattr(t, attr) is None:
                raise ConfigError(f"{path}.{attr} must be set for distillation")
        if t.key in out:
            raise ConfigError(f"{path}.key: duplicate teacher key {t.key!r}")
        out[t.key] = t
    total = sum(t.world_size for t in out.values())
    if total != pool:
        raise ConfigError(
            f"{prefix}: the teachers' num_replicas * per_replica_world_size sum to {total}, but the "
            f"teacher pool (n_gpus_per_node * nnodes) has {pool}"
        )
    return out
