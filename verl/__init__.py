"""verl: reinforcement-learning post-training of causal language models.

A single controller (`verl.trainer.RLTrainer`) writes the RL dataflow as plain Python; worker
groups (`verl.single_controller`) run the actor, rollout, reference, critic and reward model,
either in the driver process (`local`) or as Ray actors with FSDP2 (`ray`).
"""

from verl.version import __version__

__all__ = ["__version__"]
