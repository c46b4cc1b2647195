"""verl: reinforcement-learning post-training of causal language models.

A single controller (`verl.trainer.RLTrainer`) writes the RL dataflow as plain Python; worker
groups (`verl.single_controller`) run the actor, rollout, reference, critic and reward model,
either in the driver process (`local`) or as Ray actors with FSDP2 (`ray`).
"""

from typing import Any

from verl.version import __version__

__all__ = ["DataProto", "__version__"]


def __getattr__(name: str) -> Any:
    # lazy, so `import verl.config` stays free of torch (verl's `from verl import DataProto`)
    if name == "DataProto":
        from verl.protocol import DataProto

        return DataProto
    raise AttributeError(f"module 'verl' has no attribute {name!r}")
