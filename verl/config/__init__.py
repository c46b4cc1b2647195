"""verl's configuration: the typed schema, presets, loading, overrides and validation.

>>> from verl.config import load_config
>>> cfg = load_config("quickstart", ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"])

See :mod:`verl.config.pipeline` for the loading steps every command shares (YAML, ``defaults:``
lists and presets, overrides, unknown keys), :mod:`verl.config.loader` for the RL-only ones,
:mod:`verl.config.schema` for every key, :mod:`verl.config.compat.seed_layout` for the short layout of the
product's documents,
:mod:`verl.config.compat.verl_keys` for what each key of verl's reference config does here (takes
effect, documented no-op, or "not supported yet"; the keys without effect are not schema fields but
rows of :mod:`verl.config.compat.verl_inert`, applied at load). This package imports neither torch nor any
other verl package (a user's ``external_lib`` aside), so it is cheap to import.
"""

from __future__ import annotations

from verl.config.errors import ConfigError
from verl.config.finalize import finalize, world_size
from verl.config.loader import (
    PRESET_DIR,
    config_from_dict,
    config_to_yaml,
    list_presets,
    load_config,
    save_config,
    validate,
)
from verl.config.schema import (
    ActorConfig,
    ActorRolloutRefConfig,
    AlgorithmConfig,
    CriticConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    FSDPConfig,
    KLControlConfig,
    ModelConfig,
    OptimConfig,
    RefConfig,
    RewardModelConfig,
    RolloutConfig,
    RootConfig,
    TrainerConfig,
)
from verl.config.compat.seed_layout import translate_seed_layout

__all__ = [
    "PRESET_DIR",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "ConfigError",
    "CriticConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPConfig",
    "KLControlConfig",
    "ModelConfig",
    "OptimConfig",
    "RefConfig",
    "RewardModelConfig",
    "RolloutConfig",
    "RootConfig",
    "TrainerConfig",
    "config_from_dict",
    "config_to_yaml",
    "finalize",
    "list_presets",
    "load_config",
    "save_config",
    "translate_seed_layout",
    "validate",
    "world_size",
]
