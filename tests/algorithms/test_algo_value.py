"""Clipped value loss."""

from __future__ import annotations

import pytest
import torch

from verl.algorithms.value import compute_value_loss


def test_clipped_value_loss_hand_values_and_grads() -> None:
    vpreds = torch.tensor([[1.0, 2.0, 0.0, 7.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.5, 0.5]])
    returns = torch.tensor([[1.0, 1.0, 1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, m = compute_value_loss(vpreds, returns, old, mask, cliprange_value=0.2)
    # clipped preds [0.7, 0.7, 0.3]; max(unclipped, clipped) sq errors = [0.09, 1, 1]
    assert loss.item() == pytest.approx(0.5 * 2.09 / 3)
    assert m["vf_clipfrac"].item() == pytest.approx(1 / 3)
    loss.backward()
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 1 / 3, -1 / 3, 0.0]]))


def test_value_loss_uses_agg_loss_global_counts() -> None:
    vpreds = torch.tensor([[2.0, 2.0]])
    ret = torch.zeros(1, 2)
    loss, _ = compute_value_loss(vpreds, ret, vpreds, torch.ones(1, 2), 0.5, "token-mean", global_token_count=8)
    assert loss.item() == pytest.approx(0.5 * 8.0 / 8)
    loss, _ = compute_value_loss(
        vpreds, ret, vpreds, torch.ones(1, 2), 0.5, "seq-mean-token-sum-norm", loss_scale_factor=4.0
    )
    assert loss.item() == pytest.approx(0.5 * 8.0 / 4)
