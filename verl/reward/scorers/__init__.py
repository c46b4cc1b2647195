"""Rule-based reward scorers and their routing by ``data_source``.

Every scorer is a pure function ``compute_score(solution_str, ground_truth, **kw) -> float |
dict`` (a dict holds the reward under ``"score"`` plus extra metrics). :data:`SCORERS` maps each
``data_source`` string found in the data (e.g. ``"openai/gsm8k"``) to its scorer, so a dataset
routes to the right rule without any name checks in the caller:

=====================================================================  =====================
data_source                                                            scorer
=====================================================================  =====================
``openai/gsm8k``, ``gsm8k``                                            :mod:`.gsm8k` (strict)
``math``, ``math500``, ``lighteval/MATH``, ``HuggingFaceH4/MATH-500``,  :mod:`.math_answer`
``DigitalLearningGmbH/MATH-lighteval``
``builtin/arithmetic``, ``arithmetic``                                 :mod:`.arithmetic`
``json_schema``, ``builtin/json_schema``                               :mod:`.json_schema`
``builtin/calculator``                                                 :mod:`.tool_answer`
=====================================================================  =====================

Add a rule with ``register_scorer("my/source")(fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.reward.scorers import arithmetic, gsm8k, json_schema, math_answer, tool_answer
from verl.utils.registry import Registry

Scorer = Callable[..., "float | dict[str, Any]"]

SCORERS: Registry[Scorer] = Registry("reward data_source")

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
MATH_SOURCES = (
    "math",
    "math500",
    "lighteval/MATH",
    "HuggingFaceH4/MATH-500",
    "DigitalLearningGmbH/MATH-lighteval",
)
ARITHMETIC_SOURCES = ("builtin/arithmetic", "arithmetic")
JSON_SCHEMA_SOURCES = ("json_schema", "builtin/json_schema")
TOOL_ANSWER_SOURCES = ("builtin/calculator",)


def register_scorer(*data_sources: str) -> Callable[[Scorer], Scorer]:
    """Decorator registering a scorer for one or more ``data_source`` names.

    Args:
        *data_sources: Names as they appear in the dataset's ``data_source`` column.

    Returns:
        A decorator that registers the function and returns it unchanged.

    Raises:
        RegistryError: If a name is already registered.
    """

    def decorator(fn: Scorer) -> Scorer:
        for name in data_sources:
            SCORERS.add(name, fn)
        return fn

    return decorator


register_scorer(*GSM8K_SOURCES)(gsm8k.compute_score)
register_scorer(*MATH_SOURCES)(math_answer.compute_score)
register_scorer(*ARITHMETIC_SOURCES)(arithmetic.compute_score)
register_scorer(*JSON_SCHEMA_SOURCES)(json_schema.compute_score)
register_scorer(*TOOL_ANSWER_SOURCES)(tool_answer.compute_score)


def get_scorer(data_source: str) -> Scorer:
    """Returns the scorer registered for ``data_source``.

    Raises:
        RegistryError: Listing the valid data sources and the closest match on a miss.
    """
    return SCORERS.get(data_source)


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Scores one response with the rule registered for its ``data_source``.

    Args:
        data_source: Dataset name, e.g. ``"openai/gsm8k"``.
        solution_str: Decoded response (response tokens only, never the prompt).
        ground_truth: Reference answer.
        extra_info: Per-sample extra fields from the dataset, passed through to the scorer.
        **kwargs: Extra scorer options (e.g. ``format_score``).

    Returns:
        A float reward, or a dict with ``"score"`` and extra metrics.

    Raises:
        RegistryError: If no scorer is registered for ``data_source``.
    """
    scorer = get_scorer(data_source)
    return scorer(solution_str, ground_truth, extra_info=extra_info, **kwargs)


__all__ = [
    "SCORERS",
    "Scorer",
    "default_compute_score",
    "get_scorer",
    "register_scorer",
    "arithmetic",
    "gsm8k",
    "json_schema",
    "math_answer",
    "tool_answer",
]
