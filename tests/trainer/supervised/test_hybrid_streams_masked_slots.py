"""DPO's per-row log-prob sums select the response tokens: a -inf / NaN log-prob off the mask never counts."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer.supervised import streams as hybrid_streams


@pytest.mark.parametrize("poison", [-math.inf, math.nan])
def test_sequence_logps_ignore_masked_slots(monkeypatch, poison):
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # shifted by one inside: targets are mask[:, 1:]
    lp = torch.tensor([[-0.5, -1.0, poison], [-2.0, poison, poison]], requires_grad=True)
    monkeypatch.setattr(hybrid_streams, "_micro_log_probs", lambda *a, **k: (lp, mask))
    total = hybrid_streams.sequence_logps(None, None, "chosen", length_normalize=False)
    assert total.tolist() == [-1.5, -2.0]
    total.sum().backward()
    assert lp.grad.tolist() == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    mean = hybrid_streams.sequence_logps(None, None, "chosen", length_normalize=True)
    assert mean.tolist() == [-0.75, -2.0]
