"""Rule-based reward scorers and their routing by ``data_source`` (verl's ``default_compute_score``).

Every registered scorer is ``fn(solution_str, ground_truth, **kw) -> float | dict``; the built-in
ones return ``{"score", "acc", "pred"}`` (``pred`` = the extracted answer, so validation's
``maj@N`` votes on answers, not on whole texts). :data:`SCORERS` maps each ``data_source`` of
the data to its scorer, as verl routes them (the sources verl's ``default_compute_score``
knows that run on CPU without a sandbox or a service):

==========================================================================  =====================
data_source                                                                 scorer
==========================================================================  =====================
``openai/gsm8k``, ``gsm8k``                                                 :mod:`.gsm8k` (strict ``####``)
``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``,                 :mod:`.math_answer` (last
``HuggingFaceH4/MATH-500``, ``math500``, ``numina_aops_forum``,             ``\\boxed{}``, equivalence)
``numina_synthetic_math``, ``numina_amc_aime``, ``numina_synthetic_amc``,
``numina_cn_k12``, ``numina_olympiads``
``math_dapo``, ``math``, ``math_dapo_reasoning``, ``aime*`` (any source     :mod:`.math_dapo` ("Answer:"
starting with ``aime``)                                                     line, +1 / -1)
``builtin/arithmetic``, ``arithmetic``                                      :mod:`.arithmetic`
``json_schema``, ``builtin/json_schema``                                    :mod:`.json_schema`
``builtin/calculator``                                                      :mod:`.tool_answer`
==========================================================================  =====================

An unknown source is a one-line error naming these routes. Add a rule with
``register_scorer("my/source")(fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.reward.scorers import arithmetic, gsm8k, json_schema, math_answer, math_dapo, tool_answer
from verl.utils.registry import Registry, RegistryError

Scorer = Callable[..., "float | dict[str, Any]"]

SCORERS: Registry[Scorer] = Registry("reward data_source")

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
MATH_SOURCES = (
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "math500",
)
NUMINA_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)
MATH_DAPO_SOURCES = ("math_dapo", "math", "math_dapo_reasoning")
ARITHMETIC_SOURCES = ("builtin/arithmetic", "arithmetic")
JSON_SCHEMA_SOURCES = ("json_schema", "builtin/json_schema")
TOOL_ANSWER_SOURCES = ("builtin/calculator",)
PREFIX_ROUTES: dict[str, Scorer] = {"aime": math_dapo.compute_score}
"""``data_source`` prefixes routed as a family (verl: ``data_source.startswith("aime")``)."""


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


register_scorer(*GSM8K_SOURCES)(gsm8k.compute_score_with_pred)
register_scorer(*MATH_SOURCES, *NUMINA_SOURCES)(math_answer.compute_score_with_pred)
register_scorer(*MATH_DAPO_SOURCES)(math_dapo.compute_score)
register_scorer(*ARITHMETIC_SOURCES)(arithmetic.compute_score_with_pred)
register_scorer(*JSON_SCHEMA_SOURCES)(json_schema.compute_score)
register_scorer(*TOOL_ANSWER_SOURCES)(tool_answer.compute_score)


def get_scorer(data_source: str) -> Scorer:
    """Returns the scorer registered for ``data_source`` (exact name, else a prefix family).

    Raises:
        RegistryError: One line naming the routes (registered names and prefixes) and the
            closest match.
    """
    if data_source in SCORERS:
        return SCORERS.get(data_source)
    for prefix, scorer in PREFIX_ROUTES.items():
        if str(data_source).startswith(prefix):
            return scorer
    try:
        return SCORERS.get(data_source)
    except RegistryError as err:
        prefixes = ", ".join(f"{p}*" for p in PREFIX_ROUTES)
        raise RegistryError(
            f"{err} (also routed: {prefixes}); set custom_reward_function.path for other sources"
        ) from None


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Scores one response with the rule routed for its ``data_source`` (verl's signature).

    Args:
        data_source: Dataset name, e.g. ``"openai/gsm8k"``.
        solution_str: Decoded response (response tokens only, never the prompt).
        ground_truth: Reference answer.
        extra_info: Per-sample extra fields from the dataset, passed through to the scorer.
        **kwargs: Extra scorer options (e.g. ``format_score``).

    Returns:
        ``{"score", "acc", "pred"}`` from the built-in scorers (a float from a registered one
        that returns floats).

    Raises:
        RegistryError: If no scorer is routed for ``data_source``.
        ValueError: A ground truth the scorer cannot parse (a data error).
    """
    scorer = get_scorer(data_source)
    return scorer(solution_str, ground_truth, extra_info=extra_info, **kwargs)


__all__ = [
    "PREFIX_ROUTES",
    "SCORERS",
    "Scorer",
    "default_compute_score",
    "get_scorer",
    "register_scorer",
    "arithmetic",
    "gsm8k",
    "json_schema",
    "math_answer",
    "math_dapo",
    "tool_answer",
]
