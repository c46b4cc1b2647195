"""verl's validation metrics (val-core / val-aux, mean@N, std@N, best/worst/maj@n with bootstrap), hand-checked."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from verl.trainer.validation import majority_value, process_validation_metrics, subset_sizes, validation_metrics


def test_n1_gives_only_mean_at_1():
    m = validation_metrics(["a", "a", "b"], ["p", "q", "r"], {"reward": [1.0, 0.0, 0.5]})
    assert m == {"val-core/a/reward/mean@1": 0.5, "val-core/b/reward/mean@1": 0.5, "val/accuracy": pytest.approx(0.5)}


def test_acc_is_the_core_variable_when_the_scorer_reports_it():
    m = validation_metrics(["a", "a"], ["p", "q"], {"reward": [1.0, -1.0], "acc": [1.0, 0.0]})
    assert m["val-core/a/acc/mean@1"] == 0.5
    assert m["val-aux/a/reward/mean@1"] == 0.0
    assert m["val/accuracy"] == 0.5


def test_subset_sizes_are_powers_of_two_then_n():
    assert subset_sizes(1) == [] and subset_sizes(2) == [2] and subset_sizes(5) == [2, 4, 5] and subset_sizes(8) == [2, 4, 8]


def test_majority_value_ties_go_to_the_pred_seen_first():
    assert majority_value([0.0, 1.0, 1.0], ["8", "7", "7"]) == 1.0
    assert majority_value([0.0, 1.0], ["8", "7"]) == 0.0
    assert majority_value([0.3, 1.0, 0.9], ["x", "y", "x"]) == 0.3


def _expected_bootstrap(values, preds, n, seed=42):
    """Independent recomputation: the same subset draws, reduced with plain Python."""
    idx = np.random.RandomState(seed).choice(len(values), size=(1000, n), replace=True)
    best = [max(values[i] for i in row) for row in idx]
    worst = [min(values[i] for i in row) for row in idx]
    maj = []
    for row in idx:
        counts = Counter(preds[i] for i in row)
        top = max(counts.values())
        winner = next(preds[i] for i in row if counts[preds[i]] == top)
        maj.append(next(values[i] for i in row if preds[i] == winner))
    return {k: (float(np.mean(v)), float(np.std(v))) for k, v in (("best", best), ("worst", worst), ("maj", maj))}


def test_three_responses_per_prompt_names_and_values():
    values, preds = [1.0, 0.0, 0.0], ["7", "8", "8"]
    m = validation_metrics(["a"] * 3, ["p"] * 3, {"reward": values, "pred": preds})
    assert m["val-core/a/reward/mean@3"] == pytest.approx(1 / 3)
    assert m["val-aux/a/reward/std@3"] == pytest.approx(np.sqrt(2 / 9))
    for n, section in ((2, "val-aux"), (3, "val-core")):
        exp = _expected_bootstrap(values, preds, n)
        assert m[f"{section}/a/reward/best@{n}/mean"] == pytest.approx(exp["best"][0])
        assert m[f"{section}/a/reward/best@{n}/std"] == pytest.approx(exp["best"][1])
        assert m[f"{section}/a/reward/maj@{n}/mean"] == pytest.approx(exp["maj"][0])
        assert m[f"val-aux/a/reward/worst@{n}/mean"] == pytest.approx(exp["worst"][0])
        assert m[f"val-aux/a/reward/worst@{n}/std"] == pytest.approx(exp["worst"][1])
    # sanity against the closed form: P(best of 3 draws = 1) = 1 - (2/3)^3 = 19/27
    assert m["val-core/a/reward/best@3/mean"] == pytest.approx(19 / 27, abs=0.05)
    assert "val-core/a/reward/worst@3/mean" not in m and "val-core/a/reward/std@3" not in m


def test_constant_group_has_zero_spread_and_averages_over_prompts():
    m = validation_metrics(["a"] * 4, ["p", "p", "q", "q"], {"reward": [1.0, 1.0, 0.0, 0.0], "pred": ["1", "1", "2", "2"]})
    assert m["val-core/a/reward/mean@2"] == 0.5
    assert m["val-core/a/reward/best@2/mean"] == 0.5 and m["val-core/a/reward/best@2/std"] == 0.0
    assert m["val-core/a/reward/maj@2/mean"] == 0.5 and m["val-aux/a/reward/std@2"] == 0.0


def test_no_pred_means_no_majority_and_strings_are_not_metrics():
    nested = process_validation_metrics(["a"] * 2, ["p"] * 2, {"reward": [1.0, 0.0], "note": ["x", "y"]})
    assert set(nested["a"]) == {"reward"}
    assert not any(k.startswith("maj") for k in nested["a"]["reward"])
