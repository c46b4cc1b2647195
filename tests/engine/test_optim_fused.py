"""Fused AdamW (issue 14) where parameters are plain tensors; the update equals the reference loop."""

from __future__ import annotations

import torch

from verl.config.schema import OptimConfig
from verl.engine.optim import build_optimizer


def test_fused_adamw_matches_the_single_tensor_reference():
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    b = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    b.load_state_dict(a.state_dict())
    opt = build_optimizer(a, OptimConfig(lr=1e-2, weight_decay=0.1))
    assert opt.defaults["fused"] is True
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    for step in range(3):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(step))
        for model, o in ((a, opt), (b, ref)):
            model(x).square().sum().backward()
            o.step()
            o.zero_grad()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-6)
