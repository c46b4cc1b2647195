"""Log-probs and entropy: hand values, and the chunked path equals the naive one (values + grads)."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.logprob import (
    entropy_from_logits,
    logprobs_and_entropy_from_logits,
    logprobs_from_logits,
)


def test_hand_values_two_token_vocab() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]])  # p = [1/4, 3/4]
    labels = torch.tensor([1])
    assert logprobs_from_logits(logits, labels).item() == pytest.approx(math.log(0.75))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).item() == pytest.approx(h, abs=1e-6)
    lp, ent = logprobs_and_entropy_from_logits(logits, labels, chunk_size=1, compute_entropy=True)
    assert lp.item() == pytest.approx(math.log(0.75)) and ent.item() == pytest.approx(h, abs=1e-6)


def test_temperature_divides_logits() -> None:
    logits = torch.tensor([[0.0, 2.0 * math.log(3.0)]])
    lp, _ = logprobs_and_entropy_from_logits(logits, torch.tensor([1]), temperature=2.0)
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-6)


def _naive(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.float() / temperature
    return logprobs_from_logits(x, labels), entropy_from_logits(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(13, 37), (3, 6, 37)])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("chunk_size", [1, 4, 1000])
def test_chunked_equals_naive_values_and_grads(
    dtype: torch.dtype, shape: tuple[int, ...], temperature: float, chunk_size: int
) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(*shape, generator=gen) * 2).to(dtype)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    w_lp = torch.randn(shape[:-1], generator=gen)
    w_h = torch.randn(shape[:-1], generator=gen)

    a = logits.clone().requires_grad_()
    lp, ent = logprobs_and_entropy_from_logits(
        a, labels, chunk_size=chunk_size, compute_entropy=True, temperature=temperature
    )
    ((lp * w_lp).sum() + (ent * w_h).sum()).backward()

    b = logits.clone().requires_grad_()
    lp_ref, ent_ref = _naive(b, labels, temperature)
    ((lp_ref * w_lp).sum() + (ent_ref * w_h).sum()).backward()

    assert lp.dtype == torch.float32 and lp.shape == labels.shape
    torch.testing.assert_close(lp, lp_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ent_ref, rtol=1e-5, atol=1e-5)
    assert a.grad is not None and a.grad.dtype == dtype
    torch.testing.assert_close(a.grad.float(), b.grad.float(), rtol=1e-5, atol=2e-5)


def test_chunked_logprob_only_and_noncontiguous_view() -> None:
    gen = torch.Generator().manual_seed(1)
    full = torch.randn(2, 9, 11, generator=gen)
    logits = full[:, 1:-1]  # a non-contiguous slice, as logits[:, P-1:-1] in the actor
    labels = torch.randint(0, 11, (2, 7), generator=gen)
    lp, ent = logprobs_and_entropy_from_logits(logits, labels, chunk_size=3)
    assert ent is None
    torch.testing.assert_close(lp, logprobs_from_logits(logits, labels), rtol=1e-5, atol=1e-5)
    leaf = full.clone().requires_grad_()
    lp2, _ = logprobs_and_entropy_from_logits(leaf[:, 1:-1], labels, chunk_size=3)
    lp2.sum().backward()
    ref = full.clone().requires_grad_()
    logprobs_from_logits(ref[:, 1:-1], labels).sum().backward()
    torch.testing.assert_close(leaf.grad, ref.grad, rtol=1e-5, atol=1e-5)
    assert leaf.grad[:, 0].abs().sum().item() == 0.0  # rows outside the slice get no gradient


def test_chunked_rejects_bad_arguments() -> None:
    logits = torch.zeros(4, 5)
    with pytest.raises(ValueError):
        logprobs_and_entropy_from_logits(logits, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError):
        logprobs_and_entropy_from_logits(logits, torch.zeros(4, dtype=torch.long), chunk_size=0)
    with pytest.raises(ValueError):
        logprobs_and_entropy_from_logits(logits, torch.zeros(4, dtype=torch.long), temperature=0.0)
