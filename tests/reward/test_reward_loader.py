"""Loading a custom reward function from a Python file."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.reward.loader import load_custom_reward_fn

_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return float(solution_str.strip() == ground_truth) + bonus

def other(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5

NOT_A_FUNCTION = 3
"""


@pytest.fixture
def reward_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(_SOURCE)
    return path


def test_reward_loader_none_means_no_custom_reward() -> None:
    assert load_custom_reward_fn(None) is None
    assert load_custom_reward_fn("") is None


def test_reward_loader_default_and_named_function(reward_file: Path) -> None:
    fn = load_custom_reward_fn(str(reward_file))
    assert fn is not None
    assert fn(data_source="x", solution_str=" 7 ", ground_truth="7") == 1.0
    other = load_custom_reward_fn(str(reward_file), name="other")
    assert other is not None and other(data_source="x", solution_str="", ground_truth="7") == 0.5


def test_reward_loader_binds_reward_kwargs(reward_file: Path) -> None:
    fn = load_custom_reward_fn(str(reward_file), reward_kwargs={"bonus": 0.25})
    assert fn is not None and fn(data_source="x", solution_str="7", ground_truth="7") == 1.25


def test_reward_loader_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.py"):
        load_custom_reward_fn(str(tmp_path / "nope.py"))


def test_reward_loader_missing_function_lists_callables(reward_file: Path) -> None:
    with pytest.raises(AttributeError, match=r"'score_fn' not found.*compute_score.*other"):
        load_custom_reward_fn(str(reward_file), name="score_fn")


def test_reward_loader_not_callable(reward_file: Path) -> None:
    with pytest.raises(TypeError, match="not callable"):
        load_custom_reward_fn(str(reward_file), name="NOT_A_FUNCTION")


def test_reward_loader_import_error_is_chained(tmp_path: Path) -> None:
    bad = tmp_path / "bad_reward.py"
    bad.write_text("raise RuntimeError('broken at import')\n")
    with pytest.raises(ImportError, match="broken at import"):
        load_custom_reward_fn(str(bad))
