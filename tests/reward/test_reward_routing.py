"""Arithmetic scorer and routing of data sources to scorers."""

from __future__ import annotations

import pytest

from verl.reward.scorers import SCORERS, arithmetic, default_compute_score, get_scorer, gsm8k, math_answer, math_dapo
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
        ("openai/gsm8k", gsm8k.compute_score_with_pred),
        ("gsm8k", gsm8k.compute_score_with_pred),
        ("HuggingFaceH4/MATH-500", math_answer.compute_score_with_pred),
        ("math500", math_answer.compute_score_with_pred),
        ("lighteval/MATH", math_answer.compute_score_with_pred),
        ("DigitalLearningGmbH/MATH-lighteval", math_answer.compute_score_with_pred),
        ("numina_olympiads", math_answer.compute_score_with_pred),
        ("numina_cn_k12", math_answer.compute_score_with_pred),
        ("numina_amc_aime", math_answer.compute_score_with_pred),
        ("math_dapo", math_dapo.compute_score),
        ("math", math_dapo.compute_score),
        ("math_dapo_reasoning", math_dapo.compute_score),
        ("aime24", math_dapo.compute_score),
        ("aime_2025", math_dapo.compute_score),
        ("builtin/arithmetic", arithmetic.compute_score_with_pred),
    ],
)
def test_reward_routing_by_data_source(data_source: str, scorer: object) -> None:
    assert get_scorer(data_source) is scorer


def test_reward_default_compute_score_uses_the_routed_rule_and_reports_pred() -> None:
    assert default_compute_score("openai/gsm8k", "#### 1,000", "1000") == {"score": 1.0, "acc": True, "pred": "1000"}
    assert default_compute_score("openai/gsm8k", "\\boxed{1000}", "1000") == {"score": 0.0, "acc": False, "pred": ""}
    assert default_compute_score("lighteval/MATH", "\\boxed{\\frac12}", "\\frac{1}{2}")["score"] == 1.0
    out = default_compute_score("builtin/arithmetic", "37+58=95", "95", extra_info={"split": "train"})
    assert out == {"score": 1.0, "acc": True, "pred": "95"}
    # verl's module-level gsm8k.compute_score keeps returning a float
    assert gsm8k.compute_score("#### 7", "7") == 1.0


def test_reward_unknown_data_source_is_one_line_naming_the_routes() -> None:
    with pytest.raises(RegistryError) as err:
        default_compute_score("openai/gsm8kk", "#### 1", "1")
    message = str(err.value)
    assert "Did you mean 'openai/gsm8k'" in message and "builtin/arithmetic" in message
    assert "aime*" in message and "numina_olympiads" in message and "\n" not in message


def test_reward_duplicate_scorer_name_is_an_error() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        SCORERS.add("gsm8k", arithmetic.compute_score)


# ----------------------------------------------------------------------------- GSM8K numbers
@pytest.mark.parametrize(
    ("response", "truth", "pred", "score"),
    [
        ("so the total is #### 9{,}500", "9500", "9500", 1.0),  # LaTeX thousands separator {,}
        ("#### 9\\,500", "9500", "9500", 1.0),  # LaTeX thin space \,
        ("#### 9,500", "9{,}500", "9500", 1.0),  # in the ground truth too
        ("#### $1{,}234{,}567", "1234567", "1234567", 1.0),
        ("#### 9{,}50", "950", "9", 0.0),  # not a 3-digit group: no separator
        ("#### 12", "13", "12", 0.0),
    ],
)
def test_gsm8k_latex_thousands_separator(response: str, truth: str, pred: str, score: float) -> None:
    out = gsm8k.compute_score_with_pred(response, truth)
    assert out["pred"] == pred and out["score"] == score and out["acc"] is (score == 1.0)


def test_gsm8k_unparseable_ground_truth_is_an_error_not_a_zero() -> None:
    with pytest.raises(ValueError, match="not a number"):
        gsm8k.compute_score_with_pred("#### 5", "five")
    with pytest.raises(ValueError, match="not a number"):
        default_compute_score("openai/gsm8k", "#### 5", "")


# ------------------------------------------------------------------------------- math_dapo
@pytest.mark.parametrize(
    ("response", "truth", "score", "pred"),
    [
        ("reasoning...\nAnswer: 34", "34", 1.0, "34"),
        ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
        ("Answer: 12 degrees.", "12", 1.0, "12"),
        ("answer : 1,000", "1000", 1.0, "1000"),
        ("Answer: 33\nwait, Answer: 35", "35", 1.0, "35"),  # the last Answer: line
        ("Answer: 34", "35", -1.0, "34"),
        ("the result is 34", "34", -1.0, "[INVALID]"),  # no Answer: line -> -1
        ("Answer: 034", "34", 1.0, "034"),  # exact decimals
    ],
)
def test_math_dapo_answer_line_plus_minus_one(response: str, truth: str, score: float, pred: str) -> None:
    out = math_dapo.compute_score(response, truth)
    assert out == {"score": score, "acc": score == 1.0, "pred": pred}


def test_math_dapo_only_looks_at_the_last_300_characters_and_strict_box() -> None:
    assert math_dapo.compute_score("Answer: 5" + " filler" * 60, "5")["score"] == -1.0
    assert math_dapo.compute_score("so \\boxed{7}", "7", strict_box_verify=True)["score"] == 1.0
    assert math_dapo.compute_score("Answer: 7", "7", strict_box_verify=True)["score"] == -1.0
    with pytest.raises(ValueError, match="empty"):
        math_dapo.compute_score("Answer: 7", "  ")


def test_math_boxed_with_pred_and_empty_truth() -> None:
    assert math_answer.compute_score_with_pred("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}") == {
        "score": 1.0,
        "acc": True,
        "pred": "\\frac{1}{2}",
    }
    assert math_answer.compute_score_with_pred("no box", "3") == {"score": 0.0, "acc": False, "pred": ""}
    with pytest.raises(ValueError, match="empty"):
        math_answer.compute_score_with_pred("\\boxed{3}", "")


def test_arithmetic_pred() -> None:
    assert arithmetic.compute_score_with_pred("5-8=-3", "-3") == {"score": 1.0, "acc": True, "pred": "-3"}
    assert arithmetic.compute_score_with_pred("none", "3") == {"score": 0.0, "acc": False, "pred": ""}


def test_bad_ground_truth_is_counted_as_a_reward_error_by_the_manager() -> None:
    """Routed through a reward manager, the data error is counted in reward/num_errors (never a silent 0)."""
    import numpy as np
    import torch

    from verl.protocol import DataProto
    from verl.reward import create_reward_manager

    class Tok:
        def batch_decode(self, ids, skip_special_tokens=True):
            return ["#### 5" for _ in ids]

    batch = DataProto.from_dict(
        tensors={
            "responses": torch.ones(2, 3, dtype=torch.long),
            "response_mask": torch.ones(2, 3, dtype=torch.long),
            "prompts": torch.ones(2, 2, dtype=torch.long),
            "attention_mask": torch.ones(2, 5, dtype=torch.long),
        },
        non_tensors={
            "data_source": ["openai/gsm8k"] * 2,
            "reward_model": [{"ground_truth": "five"}, {"ground_truth": "5"}],
        },
    )
    out = create_reward_manager("naive", Tok(), timeout_s=None)(batch, return_dict=True)
    assert out["reward_metrics"]["reward/num_errors"] == 1.0
    assert out["reward_tensor"].sum(-1).tolist() == [0.0, 1.0]
    assert np.asarray(out["reward_extra_info"]["reward_error"]).tolist() == [True, False]
