"""Run guards against silent training failures: reward-hacking alarms, the divergence sentinel
with incident bundles and `verl replay`, and `verl verify` (paths that must agree).

Self-contained: the RL loop calls `RunGuards`' hooks (`verl.trainer.guards.hooks`) and nothing
else here; `replay` and `verify` are the ``verl replay`` / ``verl verify`` commands.
"""

from verl.trainer.guards.hooks import DivergenceError, RollbackRequested, RunGuards, fit_with_rollback

__all__ = ["DivergenceError", "RollbackRequested", "RunGuards", "fit_with_rollback"]
