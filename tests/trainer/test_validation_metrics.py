"""mean@N / best@N / maj@N per data source (hand-computed)."""

from __future__ import annotations

import pytest

from verl.trainer.validation import process_validation_metrics


def test_mean_best_maj():
    sources = ["a"] * 6 + ["b"] * 3
    uids = ["p1"] * 3 + ["p2"] * 3 + ["q1"] * 3
    scores = [1, 0, 0, 0, 0, 0, 1, 1, 0]
    answers = ["7", "8", "8", "1", "1", "2", "5", "5", "6"]
    m = process_validation_metrics(sources, uids, scores, answers)
    assert m["val-core/a/reward/mean@3"] == pytest.approx((1 / 3 + 0) / 2)
    assert m["val-core/a/reward/best@3"] == pytest.approx(0.5)
    assert m["val-core/a/reward/maj@3"] == pytest.approx(0.0)  # majority "8" and "1" are wrong
    assert m["val-core/b/reward/maj@3"] == pytest.approx(1.0)
    assert m["val/accuracy"] == pytest.approx((1 / 3 + 0 + 2 / 3) / 3)
