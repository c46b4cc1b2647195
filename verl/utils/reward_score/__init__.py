"""verl's ``verl.utils.reward_score`` import path: ``default_compute_score`` and the rule scorers.

``default_compute_score(data_source, solution_str, ground_truth, extra_info=None)`` routes by
``data_source`` exactly as the built-in reward managers do (see `verl.reward.scorers`).
"""

from __future__ import annotations

from verl.reward.scorers import arithmetic, default_compute_score, gsm8k
from verl.reward.scorers import default_compute_score as _default_compute_score  # verl's older private name
from verl.reward.scorers import math_answer as math

__all__ = ["_default_compute_score", "arithmetic", "default_compute_score", "gsm8k", "math"]
