"""``trainer.use_v1`` / ``trainer.v1.*``: verl's trainer modes and replay-buffer sampler.

Key names and defaults are verl's (``verl/trainer/config/ppo_trainer.yaml``, section
``trainer.v1``). ``sync`` is the synchronous loop of `verl.trainer.ppo.trainer`; ``separate_async``
runs `verl.trainer.async_rl` (the rollout pool generates into a replay buffer of prompt groups
while the actor trains; the rollout is standalone, as if ``actor_rollout_ref.hybrid_engine=false``);
``colocate_async`` runs `verl.trainer.async_rl.colocate` on the hybrid engine's one pool.
Checks across sections (``data.train_batch_size = parameter_sync_step x actor.ppo_mini_batch_size``)
are in `verl.config.v1_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

__all__ = [
    "TrainerV1Config",
    "SeparateAsyncConfig",
    "ColocateAsyncConfig",
    "V1SamplerConfig",
    "CustomSamplerConfig",
    "HybridRolloutSwitchConfig",
    "TRAINER_MODES",
    "OFF_POLICY_STRATEGIES",
]

TRAINER_MODES = frozenset({"sync", "colocate_async", "separate_async"})
OFF_POLICY_STRATEGIES = frozenset({"drop", "wait"})


@dataclass
class ColocateAsyncConfig:
    num_warmup_batches: int = 1
    # Prompt batches (data.train_batch_size prompts each) submitted before the first step, on top of
    # the one every step submits (>= 0, verl's default 1): they generate together with the current
    # batch, a step trains as soon as train_batch_size groups are finished, and the unfinished long
    # tail is carried to the next step (partial rollouts). 0: nothing is carried, the run equals sync.


@dataclass
class HybridRolloutSwitchConfig:
    """verl's ``separate_async.hybrid_rollout``: lending idle trainer devices to the rollout."""

    enable_switch: bool = False
    # Let the trainer pool switch to generation while it waits; true is not supported yet.


@dataclass
class SeparateAsyncConfig:
    num_warmup_batches: int = 1
    # Prompt batches (data.train_batch_size prompts each) submitted before the first step, on top of
    # the one every step submits: the rollout runs that many batches ahead of the trainer (>= 0).
    parameter_sync_step: int = 4
    # Mini-batches (actor.ppo_mini_batch_size prompt groups each, one optimizer step each) per
    # RL step; the actor's weights go to the rollout pool after each step, so every
    # parameter_sync_step mini-batches. verl requires data.train_batch_size =
    # parameter_sync_step x ppo_mini_batch_size.
    hybrid_rollout: HybridRolloutSwitchConfig = field(default_factory=HybridRolloutSwitchConfig)


@dataclass
class CustomSamplerConfig:
    path: Optional[str] = None
    # Python file (or module) of a custom replay-buffer class.
    name: Optional[str] = None
    # Class name in that file; it is built as cls(**sampler_kwargs, **the built-in buffer's arguments).


@dataclass
class V1SamplerConfig:
    max_off_policy_threshold: int = 8
    # Most policy versions a prompt group may span, counted as verl does:
    # span = current version - version at the prompt's submission + 1 (1 = generated and trained
    # under the same weights). 0 is read as 1 (on-policy: no stale group is ever trained).
    max_off_policy_strategy: str = "drop"
    # drop: a finished group over the threshold is evicted and a fresh prompt is submitted in its
    # place (the batch keeps its size); wait: sampling waits while an in-flight group has reached
    # the threshold, so that every group is trained (dropless).
    sync_refill_failed_groups: bool = False
    # verl: sync mode replaces groups whose every trajectory failed; true is not supported yet.
    custom_sampler: CustomSamplerConfig = field(default_factory=CustomSamplerConfig)
    sampler_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Keyword arguments of the custom sampler class (the built-in buffer takes none).


@dataclass
class TrainerV1Config:
    trainer_mode: str = "sync"
    # sync (the synchronous loop) | separate_async (rollout on its own pool, replay buffer,
    # bounded staleness) | colocate_async (one pool: warm-up batches generate ahead, the long
    # tail of a batch is cut and resumed under the next weights; verl.trainer.async_rl.colocate).
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    sampler: V1SamplerConfig = field(default_factory=V1SamplerConfig)
