"""LR schedule (known_faults B32 values), non-finite gradient skip, micro-batch order restore."""

from __future__ import annotations

import math

import pytest
import torch

from verl.config.schema import OptimConfig
from verl.protocol import DataProto
from verl.engine.micro_batches import split_micro_batches
from verl.engine.optim import build_lr_scheduler, build_optimizer, clip_grad_and_step, lr_multiplier
from verl.utils.seqlen_balancing import restore_order


def test_b32_linear_warmup_lr_per_update():
    model = torch.nn.Linear(2, 1)
    cfg = OptimConfig(lr=1e-6, lr_warmup_steps=4)
    opt = build_optimizer(model, cfg)
    sched = build_lr_scheduler(opt, cfg, total_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2.5e-7, 5e-7, 7.5e-7, 1e-6], rel=1e-12)


def test_linear_decays_to_floor_after_warmup():
    # warm-up 2 of 10 updates, floor 0.2: update 6 is 4 / 8 of the decay, 0.2 + 0.8 * 0.5 = 0.6
    assert lr_multiplier(1, 2, 10, "linear", 0.2) == pytest.approx(0.5)
    assert lr_multiplier(6, 2, 10, "linear", 0.2) == pytest.approx(0.6)
    assert lr_multiplier(10, 2, 10, "linear", 0.2) == pytest.approx(0.2)


def test_cosine_decays_to_floor():
    assert lr_multiplier(10, 0, 10, "cosine", 0.1) == pytest.approx(0.1)
    assert lr_multiplier(5, 0, 10, "cosine", 0.0) == pytest.approx(0.5)
    assert lr_multiplier(3, 2, 10, "constant", 0.0) == 1.0
    with pytest.raises(ValueError):
        lr_multiplier(3, 0, 10, "sqrt", 0.0)


def test_nonfinite_grad_skips_step():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    before = model.weight.detach().clone()
    (model(torch.tensor([[math.inf, 1.0]])).sum()).backward()
    norm, stepped = clip_grad_and_step(model, opt, 1.0)
    assert not stepped and not math.isfinite(norm)
    assert torch.equal(model.weight, before) and model.weight.grad is None


def test_dynamic_micro_batches_respect_cap_and_restore_order():
    mask = torch.zeros(6, 10, dtype=torch.long)
    for i, n in enumerate([7, 2, 5, 3, 6, 1]):
        mask[i, -n:] = 1
    data = DataProto.from_dict(tensors={"attention_mask": mask, "x": torch.arange(6.0)})
    micros, order = split_micro_batches(data, None, True, max_token_len=8)
    assert all(int(m.batch["attention_mask"].sum()) <= 8 for m in micros)
    assert sorted(i for g in order for i in g) == list(range(6))
    stacked = torch.cat([m.batch["x"] for m in micros])
    assert torch.equal(restore_order(stacked, order), torch.arange(6.0))
    fixed, none_order = split_micro_batches(data, 4, False, 0)
    assert [len(m) for m in fixed] == [4, 2] and none_order is None
