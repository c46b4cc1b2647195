"""verl's ``_target_`` markers: which config class marks which section.

verl's YAML marks many sections with ``_target_: <dataclass>`` (its Python config class, built
with ``omega_conf_to_dataclass``). Here the schema's own dataclasses type every section, so a
marker configures nothing; it is accepted where verl writes it and checked: the class must be
one verl uses for that section (``_target_: verl.workers.config.FSDPEngineConfig`` under
``critic.optim`` is a mistake worth one line). The table lists verl's classes (snapshot of
``verl/trainer/config/_generated_*.yaml``) with the sections each may mark; ``*`` matches one
role (``actor``, ``ref``, ``rollout``) or any path segment.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from verl.config.errors import ConfigError

__all__ = ["TARGETS", "check_target"]

_W, _P, _U = "verl.workers.config.", "verl.utils.profiler.config.", "verl.trainer.config."
_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
_PROF = tuple(f"{r}.profiler" for r in (*_ROLES, "actor_rollout_ref.rollout"))

TARGETS: dict[str, tuple[str, ...]] = {
    _U + "AlgoConfig": ("algorithm",),
    _U + "CheckpointConfig": ("actor_rollout_ref.actor.checkpoint", "critic.checkpoint"),
    _U + "FilterGroupsConfig": ("algorithm.filter_groups",),
    _U + "HybridRolloutSwitchConfig": ("trainer.v1.separate_async.hybrid_rollout",),
    _U + "KLControlConfig": ("algorithm.kl_ctrl",),
    _U + "config.ModuleConfig": ("reward.reward_manager.module",),
    "verl.utils.profiler.ProfilerConfig": (*_PROF, "global_profiler"),
    _P + "NPUToolConfig": tuple(f"{p}.tool_config.npu" for p in _PROF),
    _P + "NsightToolConfig": (*(f"{p}.tool_config.nsys" for p in _PROF), "global_profiler.global_tool_config.nsys"),
    _P + "PrecisionDebuggerToolConfig": (
        *(f"{p}.tool_config.precision_debugger" for p in _PROF),
        "global_profiler.global_tool_config.precision_debugger",
    ),
    _P + "TorchMemoryToolConfig": (
        *(f"{p}.tool_config.torch_memory" for p in _PROF),
        "global_profiler.global_tool_config.torch_memory",
    ),
    _P + "TorchProfilerScheduleConfig": tuple(f"{p}.tool_config.torch.schedule" for p in _PROF),
    _P + "TorchProfilerToolConfig": tuple(f"{p}.tool_config.torch" for p in _PROF),
    "verl.utils.skip.SkipManagerConfig": ("skip",),
    _W + "AgentLoopConfig": ("actor_rollout_ref.rollout.agent",),
    _W + "CheckpointEngineConfig": ("actor_rollout_ref.rollout.checkpoint_engine",),
    _W + "CustomAsyncServerConfig": ("actor_rollout_ref.rollout.agent.custom_async_server",),
    _W + "DistillationConfig": ("distillation",),
    _W + "DistillationLossConfig": ("distillation.distillation_loss",),
    _W + "DistillationTeacherModelConfig": ("distillation.teacher_models.*",),
    _W + "EngineRouterReplayConfig": tuple(f"{r}.{e}.router_replay" for r in _ROLES for e in ("megatron", "veomni")),
    _W + "FSDPActorConfig": ("actor_rollout_ref.actor", "actor_rollout_ref.ref"),
    _W + "FSDPCriticConfig": ("critic",),
    _W + "FSDPEngineConfig": (
        "actor_rollout_ref.actor.fsdp_config",
        "actor_rollout_ref.ref.fsdp_config",
        "critic.fsdp",
        "critic.model.fsdp_config",
    ),
    _W + "FSDPOptimizerConfig": ("actor_rollout_ref.actor.optim", "critic.optim"),
    _W + "HFModelConfig": ("actor_rollout_ref.model", "critic.model"),
    _W + "McoreActorConfig": ("actor_rollout_ref.actor", "actor_rollout_ref.ref"),
    _W + "McoreCheckpointConfig": ("actor_rollout_ref.actor.checkpoint", "critic.checkpoint"),
    _W + "McoreCriticConfig": ("critic",),
    _W + "McoreEngineConfig": tuple(f"{r}.megatron" for r in _ROLES),
    _W + "McoreOptimizerConfig": ("actor_rollout_ref.actor.optim", "critic.optim"),
    _W + "MtpConfig": ("actor_rollout_ref.model.mtp", "critic.model.mtp"),
    _W + "MultiTurnConfig": ("actor_rollout_ref.rollout.multi_turn",),
    _W + "PolicyLossConfig": ("actor_rollout_ref.actor.policy_loss",),
    _W + "PrometheusConfig": ("actor_rollout_ref.rollout.prometheus",),
    _W + "QATEngineConfig": tuple(f"{r}.{e}.qat" for r in _ROLES for e in ("fsdp_config", "fsdp", "megatron")),
    _W + "RewardConfig": ("reward",),
    _W + "RewardModelConfig": ("reward.reward_model",),
    _W + "RolloutConfig": (
        "actor_rollout_ref.rollout",
        "reward.reward_model.rollout",
        "distillation.teacher_models.*.inference",
    ),
    _W + "RouterReplayConfig": ("actor_rollout_ref.actor.router_replay", "actor_rollout_ref.ref.router_replay"),
    _W + "SamplingConfig": ("actor_rollout_ref.rollout.val_kwargs",),
    _W + "SandboxFusionConfig": ("reward.sandbox_fusion",),
    _W + "TorchTitanActorConfig": ("actor_rollout_ref.actor", "actor_rollout_ref.ref"),
    _W + "TorchTitanCriticConfig": ("critic",),
    _W + "TorchtitanEngineConfig": tuple(f"{r}.torchtitan" for r in _ROLES),
    _W + "TorchtitanOptimizerConfig": ("actor_rollout_ref.actor.optim", "actor_rollout_ref.ref.optim", "critic.optim"),
    _W + "TraceConfig": ("actor_rollout_ref.rollout.trace",),
    _W + "VeOmniActorConfig": ("actor_rollout_ref.actor", "actor_rollout_ref.ref"),
    _W + "VeOmniCriticConfig": ("critic",),
    _W + "VeOmniEngineConfig": tuple(f"{r}.veomni" for r in _ROLES),
    _W + "VeOmniOptimizerConfig": ("actor_rollout_ref.actor.optim", "critic.optim"),
    _W + "reward.RewardManagerConfig": ("reward.reward_manager",),
}
"""verl's config class -> the sections (fnmatch patterns) it marks."""


def _classes_for(section: str) -> list[str]:
    return sorted(cls for cls, paths in TARGETS.items() if any(fnmatch.fnmatchcase(section, p) for p in paths))


def check_target(section: str, value: Any) -> None:
    """Checks the ``_target_`` marker of ``section`` (a dotted path; "" for the top level).

    Raises:
        ConfigError: The value is not a string, verl marks no such section, or it names a class
            verl does not use for that section (the message lists the ones it does).
    """
    where = f"{section}._target_" if section else "_target_"
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a class name (str), got {value!r}")
    allowed = _classes_for(section)
    if not allowed:
        raise ConfigError(f"{where}={value!r}: verl marks no section '{section}' with a _target_ class; remove the key")
    if value not in allowed:
        raise ConfigError(f"{where}={value!r} does not mark this section: verl uses {' or '.join(allowed)} here")
