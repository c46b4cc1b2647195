"""The V1 async trainer modes by name: ``separate_async`` (`loop`) and ``colocate_async`` (`colocate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl.trainer.ppo.trainer import RLTrainer

__all__ = ["build_async_loop", "fit_async"]


def build_async_loop(trainer: RLTrainer) -> Any:
    """The loop of ``trainer.v1.trainer_mode``: `ColocateAsyncLoop` for ``colocate_async``, else
    `SeparateAsyncLoop`; both offer ``run``, ``start``, ``step_once`` and ``stop``."""
    if trainer.config.trainer.v1.trainer_mode == "colocate_async":
        from verl.trainer.async_rl.colocate import ColocateAsyncLoop

        return ColocateAsyncLoop(trainer)
    from verl.trainer.async_rl.loop import SeparateAsyncLoop

    return SeparateAsyncLoop(trainer)


def fit_async(trainer: RLTrainer) -> list[dict[str, float]]:
    """Run ``trainer`` in its configured V1 async mode; returns the per-step metrics."""
    return build_async_loop(trainer).run()
