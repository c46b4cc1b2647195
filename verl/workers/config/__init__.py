"""verl's ``verl.workers.config`` import path: the typed config sections, over `verl.config.schema`.

verl's names map onto the product's sections: ``ActorConfig`` / ``FSDPActorConfig`` (the actor),
``PolicyLossConfig``, ``CriticConfig``, ``RolloutConfig``, ``HFModelConfig`` (the model section),
``FSDPEngineConfig`` (``fsdp_config``), ``FSDPOptimizerConfig`` / ``OptimizerConfig`` (``optim``) and
``CheckpointConfig``. Fields keep verl's names; a user's code that builds one (e.g. to call a
policy loss with ``config=``) runs unchanged.
"""

from __future__ import annotations

from verl.config.schema import CheckpointContentConfig as CheckpointConfig
from verl.config.schema import CriticConfig, RolloutConfig
from verl.config.schema import FSDPConfig as FSDPEngineConfig
from verl.config.schema import ModelConfig as HFModelConfig
from verl.config.schema import OptimConfig as FSDPOptimizerConfig
from verl.config.schema import OptimConfig as OptimizerConfig
from verl.workers.config.actor import ActorConfig, FSDPActorConfig, PolicyLossConfig

__all__ = [
    "ActorConfig",
    "CheckpointConfig",
    "CriticConfig",
    "FSDPActorConfig",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "RolloutConfig",
]
