"""best@n / worst@n are exact over n-subsets (pass@k on 0/1), maj@n exact or sampled without replacement."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from verl.trainer.ppo.validation import best_worst_stats, majority_stats, majority_value, validation_metrics


def test_one_correct_of_four_is_best_at_4_equal_1():
    m = validation_metrics(["a"] * 4, ["p"] * 4, {"acc": [0.0, 1.0, 0.0, 0.0], "reward": [0.0, 1.0, 0.0, 0.0]})
    assert m["val-core/a/acc/best@4/mean"] == 1.0 and m["val-core/a/acc/best@4/std"] == 0.0
    assert m["val-aux/a/acc/worst@4/mean"] == 0.0
    assert m["val-aux/a/acc/best@2/mean"] == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6


@pytest.mark.parametrize("n, c, k", [(4, 1, 2), (8, 3, 4), (16, 5, 8), (10, 0, 3), (10, 10, 3), (64, 7, 32)])
def test_best_is_the_unbiased_pass_at_k_on_binary_rewards(n, c, k):
    values = [1.0] * c + [0.0] * (n - c)
    np.random.RandomState(n + c + k).shuffle(values)
    expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    assert best_worst_stats(values, k)["best"][0] == pytest.approx(expected, abs=1e-12)
    # worst = every draw correct = C(c, k) / C(n, k)
    assert best_worst_stats(values, k)["worst"][0] == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_real_rewards_hand_computed():
    # sorted 0.1 0.3 0.5 0.9; the six pairs have max .3 .5 .9 .5 .9 .9 and min .1 .1 .1 .3 .3 .5
    stats = best_worst_stats([0.1, 0.5, 0.9, 0.3], 2)
    assert stats["best"][0] == pytest.approx(4.0 / 6)
    assert stats["best"][1] == pytest.approx(math.sqrt(3.02 / 6 - (4.0 / 6) ** 2))
    assert stats["worst"][0] == pytest.approx(1.4 / 6)
    assert best_worst_stats([0.1, 0.5, 0.9, 0.3], 4) == {"best": (0.9, 0.0), "worst": (0.1, 0.0)}
    assert best_worst_stats([0.1, 0.5, 0.9, 0.3], 1)["best"][0] == pytest.approx(0.45)  # the mean


def test_matches_brute_force_enumeration_with_ties():
    values = [0.2, 0.7, 0.2, -1.0, 0.7, 0.7, 3.0]
    for k in range(1, len(values) + 1):
        maxes = [max(s) for s in itertools.combinations(values, k)]
        mins = [min(s) for s in itertools.combinations(values, k)]
        stats = best_worst_stats(values, k)
        assert stats["best"] == pytest.approx((np.mean(maxes), np.std(maxes)), abs=1e-12)
        assert stats["worst"] == pytest.approx((np.mean(mins), np.std(mins)), abs=1e-12)
    with pytest.raises(ValueError, match="subset size"):
        best_worst_stats(values, 8)


def test_majority_exact_when_enumerable_and_unbiased_when_sampled():
    values = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    preds = ["4", "5", "5", "4", "6", "4"]
    exact = [majority_value([values[i] for i in s], [preds[i] for i in s]) for s in itertools.combinations(range(6), 3)]
    assert majority_stats(values, preds, 3) == pytest.approx((np.mean(exact), np.std(exact)))
    assert majority_stats(values, preds, 6) == (1.0, 0.0)  # "4" wins the vote of all six
    # 16 responses, n = 8: C(16, 8) = 12870 > 1000 subsets -> sampled without replacement
    rng = np.random.RandomState(0)
    values16 = rng.randint(0, 2, 16).astype(float).tolist()
    preds16 = [str(int(v)) if i % 3 else "x" for i, v in enumerate(values16)]
    truth = np.mean(
        [
            majority_value([values16[i] for i in s], [preds16[i] for i in s])
            for s in itertools.combinations(range(16), 8)
        ]
    )
    mean, std = majority_stats(values16, preds16, 8)
    assert majority_stats(values16, preds16, 8) == (mean, std)  # seeded
    assert mean == pytest.approx(truth, abs=3 * std / math.sqrt(1000) + 1e-9)
