"""Trainers: `RLTrainer` (PPO family) and the seed API `create_trainer(dict)`."""

from __future__ import annotations

from typing import Any

from verl.trainer.rl_trainer import RLTrainer


def create_trainer(config: dict[str, Any], overrides: tuple[str, ...] = ()) -> RLTrainer:
    """Build an `RLTrainer` from a plain dict in the canonical or the seed-document layout.

    Example (seed API)::

        create_trainer({"rollout": {"name": "hf", "temperature": 0.7}, "algorithm": "ppo",
                        "model": {"path": "/models/tiny"}})
    """
    from verl.config import config_from_dict

    return RLTrainer(config=config_from_dict(config, overrides))


__all__ = ["RLTrainer", "create_trainer"]
