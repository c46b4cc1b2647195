"""What the trainer calls on each role's worker group (local or Ray: the same methods).

`verl.single_controller.base.WorkerGroup` exposes a worker class's ``@register`` methods; these
protocols name the methods of each role so that `TrainerParts` is typed and the loop is checked
against them. Every DataProto method is split by data-parallel rank and gathered back.
"""

from __future__ import annotations

from typing import Protocol

from verl.protocol import DataProto


class RoleGroup(Protocol):
    """Methods every role's group has."""

    world_size: int

    def shutdown(self) -> None:
        """Release the group's processes (no-op in process)."""
        ...


class ActorRolloutGroup(RoleGroup, Protocol):
    """`verl.workers.fsdp_workers.ActorRolloutRefWorker` as a group: rollout, actor and reference."""

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Responses (+ ``rollout_log_probs``) for left-padded prompts; sampling per ``meta_info``."""
        ...

    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` `(B, R)`."""
        ...

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` `(B, R)`."""
        ...

    def update_actor(self, data: DataProto) -> DataProto:
        """One RL step of policy updates; metrics in ``meta_info["metrics"]``."""
        ...

    def num_parameters(self) -> int:
        """Actor parameter count."""
        ...

    def save_checkpoint(self, out_dir: str) -> None:
        """Write the actor's engine state."""
        ...

    def load_checkpoint(self, in_dir: str) -> None:
        """Restore the actor's engine state and refresh the rollout weights."""
        ...


class CriticGroup(RoleGroup, Protocol):
    """`verl.workers.fsdp_workers.CriticWorker` as a group."""

    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` `(B, R)`."""
        ...

    def update_critic(self, data: DataProto) -> DataProto:
        """One RL step of value updates; metrics in ``meta_info["metrics"]``."""
        ...

    def save_checkpoint(self, out_dir: str) -> None:
        """Write the critic's engine state."""
        ...

    def load_checkpoint(self, in_dir: str) -> None:
        """Restore the critic's engine state."""
        ...


class RewardModelGroup(RoleGroup, Protocol):
    """`verl.workers.fsdp_workers.RewardModelWorker` as a group."""

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` `(B, R)`: the sequence score on the last valid response token."""
        ...
