"""Fused LM head + log-prob (issue 14): equal to the unfused path in values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from verl.algorithms.logprob import logprobs_and_entropy_from_logits
from verl.algorithms.logprob_head import logprobs_from_hidden

K, H, V = 37, 16, 300


def _inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(K, H, generator=g)
    weight = torch.randn(V, H, generator=g) * 0.5
    return (
        hidden,
        weight,
        torch.randint(0, V, (K,), generator=g),
        torch.randn(K, generator=g),
        torch.randn(K, generator=g),
    )


def _run(fused: bool, entropy: str, temperature: float, chunk: int, recompute: bool) -> tuple[torch.Tensor, ...]:
    """(log-probs, entropy, dL/dh, dL/dW) with L = Σ g·logp (+ Σ g_H·H when the entropy is in the loss)."""
    hidden, weight, labels, g_lp, g_h = _inputs()
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    with_entropy = entropy != "off"
    if fused:
        logp, ent = logprobs_from_hidden(hidden, weight, labels, chunk, with_entropy, temperature, recompute)
    else:
        logp, ent = logprobs_and_entropy_from_logits(F.linear(hidden, weight), labels, chunk, with_entropy, temperature)
    loss = (logp * g_lp).sum()
    if entropy == "loss":
        loss = loss + (ent * g_h).sum()
    loss.backward()
    return logp.detach(), (ent.detach() if ent is not None else torch.zeros(0)), hidden.grad, weight.grad


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize(
    ("entropy", "temperature", "chunk"), [("off", 1.0, 8), ("metric", 0.7, 5), ("loss", 0.7, 64), ("loss", 1.0, 1)]
)
def test_fused_equals_unfused_values_and_grads(recompute, entropy, temperature, chunk):
    ref = _run(False, entropy, temperature, 16, False)
    out = _run(True, entropy, temperature, chunk, recompute)
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # the log-prob is x_y − lse by hand on one row
    hidden, weight, labels, _, _ = _inputs()
    x = hidden[3] @ weight.t() / temperature
    assert float(out[0][3]) == pytest.approx(float(x[labels[3]] - torch.logsumexp(x, 0)), abs=1e-5)


def test_metric_only_entropy_costs_no_gradient_and_changes_none():
    with_metric = _run(True, "metric", 1.0, 8, False)
    without = _run(True, "off", 1.0, 8, False)
    torch.testing.assert_close(with_metric[2], without[2], atol=0, rtol=0)
    torch.testing.assert_close(with_metric[3], without[3], atol=0, rtol=0)


def test_shape_and_argument_errors():
    hidden, weight, labels, _, _ = _inputs()
    with pytest.raises(ValueError, match="expected hidden"):
        logprobs_from_hidden(hidden, weight[:, :-1], labels)
    with pytest.raises(ValueError, match="chunk_size"):
        logprobs_from_hidden(hidden, weight, labels, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        logprobs_from_hidden(hidden, weight, labels, temperature=0.0)
