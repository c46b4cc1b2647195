"""Trainers: `RLTrainer` (PPO family) and the seed API `create_trainer(dict)`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl.trainer.ppo.trainer import RLTrainer


def __getattr__(name: str) -> Any:
    # lazy: `verl doctor`, `verl merge` and the pre-flight checks import verl.trainer.* modules
    # without paying for the loop's imports (tensordict pulls in torch._dynamo: seconds)
    if name == "RLTrainer":
        from verl.trainer.ppo.trainer import RLTrainer

        return RLTrainer
    raise AttributeError(f"module 'verl.trainer' has no attribute {name!r}")


def create_trainer(config: dict[str, Any], overrides: tuple[str, ...] = ()) -> RLTrainer:
    """Build an `RLTrainer` from a plain dict in the canonical or the seed-document layout.

    Example (seed API)::

        create_trainer({"rollout": {"name": "hf", "temperature": 0.7}, "algorithm": "ppo",
                        "model": {"path": "/models/tiny"}})
    """
    from verl.config import config_from_dict
    from verl.trainer.ppo.trainer import RLTrainer

    return RLTrainer(config=config_from_dict(config, overrides))


__all__ = ["RLTrainer", "create_trainer"]
