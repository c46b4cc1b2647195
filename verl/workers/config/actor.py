"""verl's ``verl.workers.config.actor``: ``ActorConfig`` (= ``FSDPActorConfig``) and ``PolicyLossConfig``."""

from __future__ import annotations

from verl.config.schema import ActorConfig, PolicyLossConfig

FSDPActorConfig = ActorConfig

__all__ = ["ActorConfig", "FSDPActorConfig", "PolicyLossConfig"]
