"""Masked reductions, whitening, response masks (B13, B15, B17)."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.masked import (
    compute_response_mask_from_lengths,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)


def test_masked_sum_and_mean_ignore_padding_sentinels() -> None:
    values = torch.tensor([[1.0, 2.0, float("nan"), float("inf")], [3.0, -1.0, 4.0, 1.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert masked_sum(values, mask).item() == pytest.approx(9.0)
    assert masked_mean(values, mask).item() == pytest.approx(9.0 / 5)
    torch.testing.assert_close(masked_mean(values, mask, axis=-1), torch.tensor([1.5, 2.0]))
    torch.testing.assert_close(masked_sum(values, mask.float(), axis=-1), torch.tensor([3.0, 6.0]))


def test_masked_mean_of_empty_mask_is_zero_not_nan() -> None:
    values = torch.tensor([[1.0, 2.0], [5.0, 6.0]])
    mask = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    torch.testing.assert_close(masked_mean(values, mask, axis=-1), torch.tensor([0.0, 5.0]))
    assert masked_mean(values, torch.zeros(2, 2)).item() == 0.0


def test_masked_mean_float_weights() -> None:
    values = torch.tensor([2.0, 4.0])
    assert masked_mean(values, torch.tensor([0.5, 1.5])).item() == pytest.approx((1.0 + 6.0) / 2.0)


def test_masked_var_bessel_and_biased() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert masked_var(values, mask).item() == pytest.approx(1.0)
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(2.0 / 3.0)
    # one valid element: Bessel is undefined, variance 0 instead of NaN
    assert masked_var(values, torch.tensor([[1.0, 0, 0, 0]])).item() == 0.0
    rows = masked_var(torch.tensor([[1.0, 3.0], [2.0, 2.0]]), torch.ones(2, 2), axis=-1)
    torch.testing.assert_close(rows, torch.tensor([2.0, 0.0]))


def test_masked_whiten_hand_values() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0, 55.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    out = masked_whiten(values, mask)
    scale = 1.0 / math.sqrt(1.0 + 1e-8)
    torch.testing.assert_close(out, torch.tensor([[-scale, 0.0, scale, 0.0]]))
    kept_mean = masked_whiten(values, mask, shift_mean=False)
    torch.testing.assert_close(kept_mean, torch.tensor([[2.0 - scale, 2.0, 2.0 + scale, 0.0]]))


def test_b13_entropy_and_kl_metrics_ignore_padding() -> None:
    """B13: padded slots hold +1.0 (or anything): the entropy proxy is 1.0 / 0.5, KL 0.4 / 0.2."""
    for width, fill in ((4, 1.0), (8, 1.0), (8, float("nan")), (6, -123.0)):
        logp = torch.full((1, width), fill)
        logp[0, :2] = -0.5
        ref = torch.full((1, width), fill)
        ref[0, :2] = -0.7
        mask = torch.zeros(1, width)
        mask[0, :2] = 1
        assert masked_sum(-logp, mask).item() == pytest.approx(1.0)
        assert masked_mean(-logp, mask).item() == pytest.approx(0.5)
        assert masked_sum(logp - ref, mask).item() == pytest.approx(0.4)
        assert masked_mean(logp - ref, mask).item() == pytest.approx(0.2)


def test_b15_mask_from_engine_lengths() -> None:
    """B15: responses [5,6,2,0,0], [7,8,9,0,0] (no EOS), [4,4,4,4,4] with lengths 3, 3, 5."""
    mask = compute_response_mask_from_lengths(torch.tensor([3, 3, 5]), width=5)
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    torch.testing.assert_close(mask, expected)
    truncated = torch.tensor([3, 3, 5]) == 5
    assert truncated.tolist() == [False, False, True]


def test_b17_mask_is_positional_when_pad_equals_eos() -> None:
    """B17: response [5, 6, 2, 2, 2] with pad == eos == 2 and length 3 keeps its real EOS."""
    mask = compute_response_mask_from_lengths(torch.tensor([3]), width=5, dtype=torch.bool)
    assert mask.tolist() == [[True, True, True, False, False]]


def test_response_mask_rejects_bad_lengths() -> None:
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        compute_response_mask_from_lengths(torch.tensor([5]), width=4)
    with pytest.raises(ValueError):
        compute_response_mask_from_lengths(torch.tensor([-1]), width=4)
