"""Arithmetic scorer and routing of data sources to scorers."""

from __future__ import annotations

import pytest

from verl.reward.scorers import SCORERS, arithmetic, default_compute_score, get_scorer, gsm8k, math_answer
from verl.utils.registry import RegistryError


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("37+58=95", "95", 1.0),
        ("95", "95", 1.0),
        ("The answer is 95.", "95", 1.0),
        ("37+58=96", "95", 0.0),
        ("95 or maybe 96", "95", 0.0),  # the LAST integer is the answer
        ("5-8=-3", "-3", 1.0),
        ("5-8=3", "-3", 0.0),
        ("ninety-five", "95", 0.0),
        ("", "95", 0.0),
    ],
)
def test_reward_arithmetic_last_integer_exact_match(response: str, truth: str, expected: float) -> None:
    assert arithmetic.compute_score(response, truth) == expected


def test_reward_arithmetic_bad_ground_truth_is_a_data_error() -> None:
    with pytest.raises(ValueError):
        arithmetic.compute_score("95", "ninety-five")


@pytest.mark.parametrize(
    ("data_source", "scorer"),
    [
        ("openai/gsm8k", gsm8k.compute_score),
        ("gsm8k", gsm8k.compute_score),
        ("math", math_answer.compute_score),
        ("HuggingFaceH4/MATH-500", math_answer.compute_score),
        ("math500", math_answer.compute_score),
        ("lighteval/MATH", math_answer.compute_score),
        ("DigitalLearningGmbH/MATH-lighteval", math_answer.compute_score),
        ("builtin/arithmetic", arithmetic.compute_score),
    ],
)
def test_reward_routing_by_data_source(data_source: str, scorer: object) -> None:
    assert get_scorer(data_source) is scorer


def test_reward_default_compute_score_uses_the_routed_rule() -> None:
    assert default_compute_score("openai/gsm8k", "#### 1,000", "1000") == 1.0
    assert default_compute_score("openai/gsm8k", "\\boxed{1000}", "1000") == 0.0  # gsm8k needs ####
    assert default_compute_score("lighteval/MATH", "\\boxed{\\frac12}", "\\frac{1}{2}") == 1.0
    assert default_compute_score("builtin/arithmetic", "37+58=95", "95", extra_info={"split": "train"}) == 1.0


def test_reward_unknown_data_source_lists_names_and_closest_match() -> None:
    with pytest.raises(RegistryError) as err:
        default_compute_score("openai/gsm8kk", "#### 1", "1")
    message = str(err.value)
    assert "Did you mean 'openai/gsm8k'" in message and "builtin/arithmetic" in message


def test_reward_duplicate_scorer_name_is_an_error() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        SCORERS.add("gsm8k", arithmetic.compute_score)
