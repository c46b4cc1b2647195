"""Asynchronous RL on verl's V1 keys: ``trainer.v1.trainer_mode=separate_async`` (see `loop`) and
``colocate_async`` (see `colocate`)."""

from verl.trainer.async_rl.loop import SeparateAsyncLoop, build_replay_buffer
from verl.trainer.async_rl.modes import build_async_loop, fit_async
from verl.trainer.async_rl.off_policy import off_policy_metrics
from verl.trainer.async_rl.replay_buffer import ReplayBuffer

__all__ = [
    "ReplayBuffer",
    "SeparateAsyncLoop",
    "build_async_loop",
    "build_replay_buffer",
    "fit_async",
    "off_policy_metrics",
]
