"""Rewards: rule-based scorers, reward managers and custom reward loading.

- :mod:`verl.reward.scorers`: ``compute_score(solution_str, ground_truth, **kw)`` rules
  (gsm8k, math, arithmetic) routed by ``data_source`` through :func:`default_compute_score`.
- :mod:`verl.reward.managers`: ``naive`` / ``dapo`` / ``gdpo`` / ``prime`` / ``batch`` managers that
  decode response tokens of a DataProto, score them with timeouts and place token-level rewards.
- :mod:`verl.reward.scoring`: the scoring core (per-call deadline, failure counts) and the failure
  policy shared by the managers, the trainer and ``verl eval``.
- :mod:`verl.reward.overlong`: the DAPO overlong penalty.
- :mod:`verl.reward.verl_managers`: verl-style manager classes registered by name, behind an
  adapter with the managers' constructor.
- :mod:`verl.reward.loader`: :func:`load_custom_reward_fn` for ``custom_reward_function.path``.

This package imports no Ray, workers or trainer code.
"""

from __future__ import annotations

from verl.reward.loader import load_custom_reward_fn
from verl.reward.managers import (
    REWARD_MANAGERS,
    BatchRewardManager,
    NaiveRewardManager,
    create_reward_manager,
)
from verl.reward.overlong import OverlongBufferConfig, overlong_penalty
from verl.reward.scorers import SCORERS, default_compute_score, get_scorer, register_scorer
from verl.reward.verl_managers import register as register_reward_manager

__all__ = [
    "REWARD_MANAGERS",
    "SCORERS",
    "BatchRewardManager",
    "NaiveRewardManager",
    "OverlongBufferConfig",
    "create_reward_manager",
    "default_compute_score",
    "get_scorer",
    "load_custom_reward_fn",
    "overlong_penalty",
    "register_reward_manager",
    "register_scorer",
]
