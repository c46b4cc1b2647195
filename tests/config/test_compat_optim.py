"""verl's optim keys: lr_scheduler_type (warmup_style alias), num_cycles, min_lr_ratio, clip_grad."""

from __future__ import annotations

import pytest
import torch

from verl.config import load_config
from verl.engine.optim import build_lr_scheduler, lr_multiplier


def test_num_cycles_hand_computed():
    # no warm-up, 10 updates, floor 0: multiplier = (1 + cos(2 pi c p)) / 2, p = (step) / 10
    assert lr_multiplier(5, 0, 10, "cosine", 0.0, num_cycles=1.0) == pytest.approx(0.0, abs=1e-12)
    assert lr_multiplier(10, 0, 10, "cosine", 0.0, num_cycles=1.0) == pytest.approx(1.0)
    assert lr_multiplier(5, 0, 10, "cosine", 0.2, num_cycles=0.5) == pytest.approx(0.2 + 0.8 * 0.5)
    assert lr_multiplier(10, 0, 10, "cosine", 0.2, num_cycles=0.5) == pytest.approx(0.2)


@pytest.mark.parametrize("key", ["lr_scheduler_type", "warmup_style"])
def test_cosine_schedule_from_either_key(key):
    cfg = load_config(
        None,
        [
            f"actor_rollout_ref.actor.optim.{key}=cosine",
            "actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
            "actor_rollout_ref.actor.optim.num_cycles=0.5",
            "actor_rollout_ref.actor.optim.lr=1.0",
        ],
    )
    optim_cfg = cfg.actor_rollout_ref.actor.optim
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_lr_scheduler(opt, optim_cfg, total_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # update k uses 0.1 + 0.9 * (1 + cos(pi * k / 4)) / 2 for k = 1..4
    import math

    assert lrs == pytest.approx([0.1 + 0.9 * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(1, 5)])


def test_clip_grad_sets_grad_clip():
    cfg = load_config(None, ["critic.optim.clip_grad=0.3"])
    assert cfg.critic.grad_clip == 0.3 and cfg.critic.optim.clip_grad == 0.3
