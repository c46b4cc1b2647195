"""Built-in quick-start task: schema, determinism, held-out split, correct ground truths."""

from __future__ import annotations

import random

import pytest

from verl.data.builtin_task import (
    CARRY_FRACTION,
    DATA_SOURCE,
    TASKS,
    arithmetic_problems,
    load_builtin_rows,
    needs_carry,
)
from verl.reward.scorers.arithmetic import compute_score


def operands(row: dict) -> tuple[int, int]:
    """The two operands parsed back from the prompt text, e.g. "47+38" -> (47, 38)."""
    a, b = row["prompt"][0]["content"].split("+")
    return int(a), int(b)


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    return {split: load_builtin_rows("arithmetic", split) for split in ("train", "test")}


def test_needs_carry_hand_values() -> None:
    assert needs_carry(47, 38) is True  # 7 + 8 = 15
    assert needs_carry(41, 38) is False  # 1 + 8 = 9
    assert needs_carry(15, 95) is True  # 5 + 5 = 10, the boundary
    assert needs_carry(14, 95) is False


def test_schema_and_pinned_first_rows(rows: dict[str, list[dict]]) -> None:
    """The first test row is fixed by the seeds: a changed split silently changes every curve."""
    assert rows["test"][0] == {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": "68+74"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "142"},
        "extra_info": {"split": "test", "index": 0},
    }
    assert rows["train"][0]["prompt"] == [{"role": "user", "content": "44+70"}]
    assert (len(rows["train"]), len(rows["test"])) == (4128, 512)
    for split, split_rows in rows.items():
        assert [r["extra_info"] for r in split_rows] == [{"split": split, "index": i} for i in range(len(split_rows))]


def test_ground_truth_is_the_sum_and_scores_one(rows: dict[str, list[dict]]) -> None:
    for row in rows["train"] + rows["test"]:
        a, b = operands(row)
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert row["reward_model"]["ground_truth"] == str(a + b)
        assert compute_score(str(a + b), row["reward_model"]["ground_truth"]) == 1.0
        assert compute_score(str(a + b + 10), row["reward_model"]["ground_truth"]) == 0.0


def test_deterministic_and_independent_of_global_rng() -> None:
    random.seed(0)
    first = load_builtin_rows("arithmetic", "train")
    random.seed(12345)
    random.random()
    assert load_builtin_rows("arithmetic", "train") == first
    assert arithmetic_problems("test") == [operands(r) for r in load_builtin_rows("arithmetic", "test")]


def test_train_and_test_disjoint_by_unordered_pair(rows: dict[str, list[dict]]) -> None:
    """Held out means no test problem is in train, not even with its operands swapped."""
    train = {frozenset((a, b)) for a, b in map(operands, rows["train"])}
    test = {frozenset((a, b)) for a, b in map(operands, rows["test"])}
    assert not train & test
    for split_rows in rows.values():
        prompts = [r["prompt"][0]["content"] for r in split_rows]
        assert len(set(prompts)) == len(prompts)


def test_carry_fraction_per_split(rows: dict[str, list[dict]]) -> None:
    assert CARRY_FRACTION == 0.75
    for split_rows in rows.values():
        carries = sum(needs_carry(*operands(r)) for r in split_rows)
        assert carries == round(CARRY_FRACTION * len(split_rows))


def test_unknown_task_and_split_errors_list_valid_names() -> None:
    assert sorted(TASKS) == ["arithmetic", "calculator"]
    with pytest.raises(ValueError, match=r"unknown built-in task 'countdwn'.*\['arithmetic', 'calculator'\]"):
        load_builtin_rows("countdwn", "train")
    with pytest.raises(ValueError, match=r"unknown split 'val'.*\['test', 'train'\]"):
        load_builtin_rows("arithmetic", "val")
