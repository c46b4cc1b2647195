"""agg_loss: mode values (B10, B11), gradient accumulation (B07, B08), micro-batch property."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.algorithms.aggregation import LOSS_AGG_MODES, agg_loss, loss_normalizers


def _ab(width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """B10/B11 batch: A = [2, 2], B = [1, 1, 1, 1]; padded slots hold garbage."""
    loss = torch.full((2, width), 123.0)
    loss[0, :2] = 2.0
    loss[1, :4] = 1.0
    mask = torch.zeros(2, width)
    mask[0, :2] = 1
    mask[1, :4] = 1
    return loss, mask


def test_b10_modes_differ() -> None:
    loss, mask = _ab()
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(8 / 6)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(1.5)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-sum"):
        agg_loss(loss, mask, "seq-mean")


def test_b11_token_sum_norm_constant_divisor() -> None:
    loss, mask = _ab()
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=4).item() == pytest.approx(1.0)
    dup = torch.cat([loss, loss]), torch.cat([mask, mask])
    assert agg_loss(*dup, "seq-mean-token-sum-norm", loss_scale_factor=4).item() == pytest.approx(1.0)
    wide = _ab(width=6)
    assert agg_loss(*wide, "seq-mean-token-sum-norm", loss_scale_factor=4).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="loss_scale_factor"):
        agg_loss(loss, mask, "seq-mean-token-sum-norm")


def _b07_batch():
    """A: 1 valid token with loss 2; B: 3 valid tokens with loss 1 (loss = w * const, w a leaf)."""
    const = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    return const, mask


@pytest.mark.parametrize(("mode", "value"), [("token-mean", 1.25), ("seq-mean-token-mean", 1.5)])
def test_b07_micro_batches_equal_full_batch(mode: str, value: float) -> None:
    const, mask = _b07_batch()
    tokens, seqs = loss_normalizers(mask)
    assert (tokens, seqs) == (4.0, 2.0)

    w_full = torch.ones(2, 3, requires_grad=True)
    full = agg_loss(w_full * const, mask, mode)
    full.backward()

    w_micro = torch.ones(2, 3, requires_grad=True)
    total = sum(
        agg_loss((w_micro * const)[i : i + 1], mask[i : i + 1], mode, global_token_count=tokens, global_seq_count=seqs)
        for i in range(2)
    )
    total.backward()
    assert full.item() == pytest.approx(value) and total.item() == pytest.approx(value)
    torch.testing.assert_close(w_micro.grad, w_full.grad, rtol=1e-6, atol=0)
    if mode == "token-mean":  # the fault would weight each micro token-mean by 1/2: 1.5
        assert total.item() != pytest.approx(0.5 * 2.0 + 0.5 * 1.0)


def test_b07_uneven_sample_counts_dynamic_bsz() -> None:
    const = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0], [4.0, 4.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    tokens, _ = loss_normalizers(mask)
    full = agg_loss(const, mask, "token-mean")
    parts = agg_loss(const[:1], mask[:1], "token-mean", global_token_count=tokens) + agg_loss(
        const[1:], mask[1:], "token-mean", global_token_count=tokens
    )
    assert full.item() == pytest.approx(13 / 6) and parts.item() == pytest.approx(13 / 6)


def test_b08_normaliser_is_the_accumulation_window() -> None:
    """GA = 4 micro-batches of 10 tokens with loss 1: step loss 1.0 (bug: 0.25); 8 per generation: window 40."""
    micro = [(torch.ones(1, 10, requires_grad=True), torch.ones(1, 10)) for _ in range(8)]
    window = micro[:4]
    tokens = sum(loss_normalizers(m)[0] for _, m in window)
    assert tokens == 40
    step = sum(agg_loss(w * 1.0, m, "token-mean", global_token_count=tokens) for w, m in window)
    assert step.item() == pytest.approx(1.0)
    assert [agg_loss(w * 1.0, m, "token-mean", global_token_count=tokens).item() for w, m in window] == [0.25] * 4
    step.backward()
    w_one = torch.ones(1, 40, requires_grad=True)
    agg_loss(w_one * 1.0, torch.ones(1, 40), "token-mean").backward()
    torch.testing.assert_close(torch.cat([w.grad for w, _ in window], dim=1), w_one.grad)


def test_empty_mask_gives_zero_loss_not_nan() -> None:
    loss = torch.ones(2, 3, requires_grad=True)
    for mode in LOSS_AGG_MODES:
        out = agg_loss(loss, torch.zeros(2, 3), mode, loss_scale_factor=3)
        assert out.item() == 0.0
        out.backward()
        assert torch.isfinite(loss.grad).all()


def test_property_micro_batch_gradients_equal_full_batch() -> None:
    """Random masks (>= 1 valid token per row) and random micro-batch splits, every mode."""
    rng = np.random.default_rng(0)
    for trial in range(40):
        batch, width = int(rng.integers(1, 9)), int(rng.integers(1, 7))
        lengths = rng.integers(1, width + 1, size=batch)
        mask = torch.tensor((np.arange(width)[None] < lengths[:, None]).astype(np.float32))
        if trial % 2:  # non-prefix masks too (multi-turn style gaps), keeping >= 1 valid token per row
            gaps = torch.tensor(rng.random((batch, width)) < 0.3)
            mask = torch.where(gaps & (mask.sum(-1, keepdim=True) > 1) & (torch.arange(width) > 0), 0.0, mask)
        x = torch.tensor(rng.normal(size=(batch, width)), dtype=torch.float32)
        perm = rng.permutation(batch)
        cuts = (
            sorted(rng.choice(np.arange(1, batch), size=min(batch - 1, int(rng.integers(0, 4))), replace=False))
            if batch > 1
            else []
        )
        parts = np.split(perm, cuts)
        tokens, seqs = loss_normalizers(mask)
        for mode in LOSS_AGG_MODES:
            w_full = torch.tensor(rng.normal(size=(batch, width)), dtype=torch.float32, requires_grad=True)
            agg_loss(w_full**2 * x, mask, mode, loss_scale_factor=7.0).backward()
            w_micro = w_full.detach().clone().requires_grad_()
            total = sum(
                agg_loss(
                    (w_micro**2 * x)[idx],
                    mask[idx],
                    mode,
                    global_token_count=tokens,
                    global_seq_count=seqs,
                    loss_scale_factor=7.0,
                )
                for idx in parts
            )
            total.backward()
            torch.testing.assert_close(w_micro.grad, w_full.grad, rtol=1e-5, atol=1e-6, msg=f"{mode} {trial}")
