"""The training engine seam shared by the PPO actor, the critic, SFT and DPO (see `base`)."""

from __future__ import annotations

from verl.engine.base import GlobalCounts, LossFn, TrainingEngine

__all__ = ["GlobalCounts", "LossFn", "TrainingEngine"]
