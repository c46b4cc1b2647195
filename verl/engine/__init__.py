"""The training engine shared by the PPO actor, the critic, SFT and DPO (see `base`, `fsdp_engine`)."""

from __future__ import annotations

from verl.engine.base import ForwardFn, GlobalCounts, LossFn, MicroBatchSpec, StepResult, TrainingEngine
from verl.engine.fsdp_engine import FSDPTrainingEngine, build_engine

__all__ = [
    "FSDPTrainingEngine",
    "ForwardFn",
    "GlobalCounts",
    "LossFn",
    "MicroBatchSpec",
    "StepResult",
    "TrainingEngine",
    "build_engine",
]
