"""verl's validation metrics (val-core / val-aux, mean@N, std@N, best/worst/maj@n over subsets), hand-checked."""

from __future__ import annotations

import numpy as np
import pytest

from verl.trainer.ppo.validation import majority_value, process_validation_metrics, subset_sizes, validation_metrics


def test_n1_gives_only_mean_at_1():
    m = validation_metrics(["a", "a", "b"], ["p", "q", "r"], {"reward": [1.0, 0.0, 0.5]})
    assert m == {"val-core/a/reward/mean@1": 0.5, "val-core/b/reward/mean@1": 0.5, "val/accuracy": pytest.approx(0.5)}


def test_acc_is_the_core_variable_when_the_scorer_reports_it():
    m = validation_metrics(["a", "a"], ["p", "q"], {"reward": [1.0, -1.0], "acc": [1.0, 0.0]})
    assert m["val-core/a/acc/mean@1"] == 0.5
    assert m["val-aux/a/reward/mean@1"] == 0.0
    assert m["val/accuracy"] == 0.5


def test_subset_sizes_are_powers_of_two_then_n():
    assert (
        subset_sizes(1) == []
        and subset_sizes(2) == [2]
        and subset_sizes(5) == [2, 4, 5]
        and subset_sizes(8) == [2, 4, 8]
    )


def test_majority_value_ties_go_to_the_pred_seen_first():
    assert majority_value([0.0, 1.0, 1.0], ["8", "7", "7"]) == 1.0
    assert majority_value([0.0, 1.0], ["8", "7"]) == 0.0
    assert majority_value([0.3, 1.0, 0.9], ["x", "y", "x"]) == 0.3


def test_three_responses_per_prompt_names_and_values():
    values, preds = [1.0, 0.0, 0.0], ["7", "8", "8"]
    m = validation_metrics(["a"] * 3, ["p"] * 3, {"reward": values, "pred": preds})
    assert m["val-core/a/reward/mean@3"] == pytest.approx(1 / 3)
    assert m["val-aux/a/reward/std@3"] == pytest.approx(np.sqrt(2 / 9))
    # pairs (0,1) (0,2) (1,2): max 1, 1, 0 -> 2/3 = 1 - C(2,2)/C(3,2); min 0 always
    assert m["val-aux/a/reward/best@2/mean"] == pytest.approx(2 / 3)
    assert m["val-aux/a/reward/best@2/std"] == pytest.approx(np.sqrt(2 / 9))
    assert m["val-aux/a/reward/worst@2/mean"] == 0.0 and m["val-aux/a/reward/worst@2/std"] == 0.0
    # majority of a pair: ties go to the earlier response ("7", value 1) in (0,1), (0,2); "8" in (1,2)
    assert m["val-aux/a/reward/maj@2/mean"] == pytest.approx(2 / 3)
    assert m["val-aux/a/reward/maj@2/std"] == pytest.approx(np.sqrt(2 / 9))
    # n = N: the max, the min and the vote of all three, exactly
    assert m["val-core/a/reward/best@3/mean"] == 1.0 and m["val-core/a/reward/best@3/std"] == 0.0
    assert m["val-aux/a/reward/worst@3/mean"] == 0.0 and m["val-aux/a/reward/worst@3/std"] == 0.0
    assert m["val-core/a/reward/maj@3/mean"] == 0.0 and m["val-core/a/reward/maj@3/std"] == 0.0
    assert "val-core/a/reward/worst@3/mean" not in m and "val-core/a/reward/std@3" not in m


def test_constant_group_has_zero_spread_and_averages_over_prompts():
    m = validation_metrics(
        ["a"] * 4, ["p", "p", "q", "q"], {"reward": [1.0, 1.0, 0.0, 0.0], "pred": ["1", "1", "2", "2"]}
    )
    assert m["val-core/a/reward/mean@2"] == 0.5
    assert m["val-core/a/reward/best@2/mean"] == 0.5 and m["val-core/a/reward/best@2/std"] == 0.0
    assert m["val-core/a/reward/maj@2/mean"] == 0.5 and m["val-aux/a/reward/std@2"] == 0.0


def test_no_pred_means_no_majority_and_strings_are_not_metrics():
    nested = process_validation_metrics(["a"] * 2, ["p"] * 2, {"reward": [1.0, 0.0], "note": ["x", "y"]})
    assert set(nested["a"]) == {"reward"}
    assert not any(k.startswith("maj") for k in nested["a"]["reward"])
