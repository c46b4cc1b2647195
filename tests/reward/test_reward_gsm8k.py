"""GSM8K scorer: strict / flexible extraction, numeric equality, B19, and the real test split."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from verl.reward.scorers import gsm8k


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("2+40=42\n#### 42", "42", 1.0),
        ("#### 42.0", "42", 1.0),  # compared numerically
        ("#### 1,000", "1000", 1.0),
        ("#### $1,000.00", "1000", 1.0),
        ("#### 18.", "18", 1.0),  # sentence-final period
        ("####-3", "-3", 1.0),
        ("#### 42", "43", 0.0),
        ("#### 4.2", "42", 0.0),
        ("The answer is 42", "42", 0.0),  # strict mode needs the marker
        ("#### 7\nwait, redo\n#### 42", "42", 1.0),  # the LAST marker wins
        ("#### 42\n#### 7", "42", 0.0),
        ("#### forty-two", "42", 0.0),
        ("", "42", 0.0),
    ],
)
def test_reward_gsm8k_strict(response: str, truth: str, expected: float) -> None:
    assert gsm8k.compute_score(response, truth) == expected


def test_reward_gsm8k_flexible_takes_last_number() -> None:
    assert gsm8k.compute_score("so 3 apples cost $1,200 in total", "1200", method="flexible") == 1.0
    assert gsm8k.compute_score("40+2 = 42, not 41", "42", method="flexible") == 0.0
    assert gsm8k.compute_score("no digits here", "42", method="flexible") == 0.0
    assert gsm8k.extract_answer("values 1,2,3", method="flexible") == "3"  # a list is not "123"


def test_reward_gsm8k_format_score_only_for_parsed_wrong_answers() -> None:
    assert gsm8k.compute_score("#### 41", "42", format_score=0.1) == pytest.approx(0.1)
    assert gsm8k.compute_score("#### 42", "42", format_score=0.1) == 1.0
    assert gsm8k.compute_score("forty-one", "42", format_score=0.1) == 0.0


def test_reward_gsm8k_unknown_method_raises() -> None:
    with pytest.raises(ValueError, match="flexible"):
        gsm8k.compute_score("#### 1", "1", method="loose")  # type: ignore[arg-type]


def test_reward_gsm8k_b19_answer_followed_by_long_tail() -> None:
    """B19: a correct '#### 42' followed by 400 characters of text still scores 1.0."""
    tail = ("lorem ipsum dolor sit amet " * 20)[:400]
    assert len(tail) == 400 and not any(c.isdigit() or c == "#" for c in tail)
    response = "2+40=42\n#### 42\n" + tail
    assert gsm8k.compute_score(response, "42") == 1.0
    assert gsm8k.compute_score(response, "42") == gsm8k.compute_score("2+40=42\n#### 42\n", "42")


def _gsm8k_rows(shared_dir: Path) -> list[dict[str, str]]:
    path = shared_dir / "data" / "gsm8k" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with path.open() as f:
        return [json.loads(line) for line in f]


def _truth(answer: str) -> str:
    return answer.split("#### ")[-1].strip().replace(",", "")


def test_reward_gsm8k_every_reference_solution_scores_one(shared_dir: Path) -> None:
    rows = _gsm8k_rows(shared_dir)
    assert len(rows) == 1319
    scores = [gsm8k.compute_score(r["answer"], _truth(r["answer"])) for r in rows]
    failures = [i for i, s in enumerate(scores) if s != 1.0]
    assert failures == []


def test_reward_gsm8k_shuffled_pairing_scores_near_zero(shared_dir: Path) -> None:
    rows = _gsm8k_rows(shared_dir)
    rng = random.Random(1234)
    order = list(range(len(rows)))
    while any(i == j for i, j in enumerate(order)):  # a derangement: nobody keeps its own truth
        rng.shuffle(order)
    hits = sum(gsm8k.compute_score(rows[i]["answer"], _truth(rows[j]["answer"])) for i, j in enumerate(order))
    assert hits / len(rows) < 0.02
