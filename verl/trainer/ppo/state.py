"""What a run is made of (`TrainerParts`) and where it stands (`TrainerState`).

Builders (`verl.trainer.ppo.builders`) make the parts; the loop (`verl.trainer.ppo.trainer`) and the
checkpoints (`verl.run.checkpoint`) read them. Nothing here builds anything, so restoring a
checkpoint never starts a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol


if TYPE_CHECKING:
    from verl.algorithms import KLController
    from verl.data import RLDataLoader
    from verl.run.checkpoint import CheckpointManager
    from verl.run.tracking import Tracking
    from verl.workers.protocols import ActorRolloutGroup, CriticGroup, RewardModelGroup

RewardFn = Callable[..., Any]
# reward_fn(batch: DataProto, return_dict=True) -> {"reward_tensor": (B, R), "reward_extra_info": ..., ...}


class ResourcePool(Protocol):
    """Devices reserved for worker groups (`verl.single_controller.ray.RayResourcePool`)."""

    def release(self) -> None:
        """Give the devices back."""
        ...


@dataclass
class TrainerParts:
    """Everything `RLTrainer` drives, assembled by `verl.trainer.ppo.builders.build_parts`.

    Attributes:
        tokenizer: the data tokenizer (pad id of the prompts, decoding for validation).
        train_dataloader / val_dataloader: prompts (stateful; val None = no validation).
        reward_fn / val_reward_fn: reward managers for training and validation.
        actor_rollout_wg / critic_wg / rm_wg: the role groups (critic, reward model optional).
        resource_pools: pools to release at the end (Ray), distinct.
        kl_ctrl: in-reward KL controller (``use_kl_in_reward``), else None.
        tracker: metric loggers; checkpoints: ``global_step_N`` directories.
        total_training_steps: RL steps of the run; n_params: actor parameters (for MFU).
        world_size: data-parallel size; history: per-step metrics so far.
    """

    tokenizer: Any
    train_dataloader: RLDataLoader
    val_dataloader: RLDataLoader | None
    reward_fn: RewardFn
    val_reward_fn: RewardFn
    actor_rollout_wg: ActorRolloutGroup
    critic_wg: CriticGroup | None = None
    rm_wg: RewardModelGroup | None = None
    resource_pools: list[ResourcePool] = field(default_factory=list)
    kl_ctrl: KLController | None = None
    tracker: Tracking | None = None
    checkpoints: CheckpointManager | None = None
    total_training_steps: int = 0
    n_params: int = 0
    world_size: int = 1
    history: list[dict[str, float]] = field(default_factory=list)
    teacher: Any = None
    # on-policy distillation's teachers (`verl.trainer.ppo.distillation.TeacherScorer`), else None


@dataclass
class TrainerState:
    """Where the loop stands: RL steps done and epochs completed (saved with every checkpoint)."""

    global_step: int = 0
    epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # mode-specific state saved with the checkpoint (the async loop's prompts not yet trained);
    # tensors, numbers, strings, lists and dicts only (loaded with weights_only=True)
