"""DAPO's group filter drops groups whose values are equal up to round-off (np.std ≈ 1e-17)."""

from __future__ import annotations

import math

import numpy as np

from verl.trainer.ppo.dynamic_sampling import kept_group_mask


def test_round_off_groups_are_dropped_and_varying_groups_kept():
    uids = np.array(["a"] * 3 + ["b"] * 3 + ["c"] * 2 + ["d"], dtype=object)
    values = np.array(
        [
            0.1,
            0.1,
            0.1,  # np.std 1.4e-17
            0.1 + 0.2,
            0.3,
            0.30000000000000004,  # np.std 3.2e-17
            0.3,
            0.3000001,  # a real (1e-7) difference
            0.5,
        ]
    )  # singleton: kept
    assert np.std(values[:3]) > 0 and np.std(values[3:6]) > 0
    mask, kept, n = kept_group_mask(uids, values)
    assert kept == ["c", "d"] and n == 4
    assert mask.tolist() == [False] * 6 + [True] * 3


def test_non_finite_values_are_left_out_of_the_test():
    uids = np.array(["a", "a", "a", "b", "b", "c", "c"], dtype=object)
    values = np.array([1.0, 0.0, math.nan, 1.0, math.nan, math.nan, math.nan])
    _, kept, _ = kept_group_mask(uids, values)
    assert kept == ["a"]  # a varies over its finite values; b and c have fewer than two
