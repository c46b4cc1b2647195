"""Losses and estimators at the values verl's scripts use: clip_ratio_low >= 1, groups of one."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from verl.algorithms import compute_advantage
from verl.algorithms.policy_loss import POLICY_LOSSES


def _one_token(ratio: float, advantage: float) -> tuple[torch.Tensor, ...]:
    old = torch.zeros(1, 1)
    lp = torch.full((1, 1), math.log(ratio), requires_grad=True)
    return old, lp, torch.full((1, 1), advantage), torch.ones(1, 1)


@pytest.mark.parametrize("name", ["vanilla", "gspo"])
@pytest.mark.parametrize(("low", "loss", "grad"), [(0.2, 0.8, 0.0), (10.0, 0.5, 0.5)])
def test_lower_clip_off_when_clip_ratio_low_exceeds_one(name: str, low: float, loss: float, grad: float) -> None:
    # A = -1, r = 0.5 (one token: GSPO's sequence ratio is r too): eps_low = 0.2 clips r at 0.8
    # (loss -A * 0.8, no gradient); eps_low = 10 gives the bound 1 - 10 = -9 < r, so the loss stays
    # -A r with dL/dlogp = -A r = 0.5 (vanilla's dual clip -A * 3 = 3 is not reached)
    old, lp, adv, mask = _one_token(0.5, -1.0)
    pg, m = POLICY_LOSSES.get(name)(old, lp, adv, mask, clip_ratio_low=low, clip_ratio_high=0.28, clip_ratio_c=3.0)
    pg.sum().backward()
    assert pg.item() == pytest.approx(loss, abs=1e-6) and lp.grad.item() == pytest.approx(grad, abs=1e-6)
    assert m["pg_clipfrac"].item() == (1.0 if low < 1 else 0.0)


@pytest.mark.parametrize(("low", "weight"), [(0.2, 0.8), (10.0, 0.5)])
def test_cispo_weight_unbounded_below_at_verl_script_value(low: float, weight: float) -> None:
    # L = -sg[clip(r, 1 - eps_low, 1 + eps_high)] A log pi; r = 0.5, A = 1, log pi = log 0.5
    old, lp, adv, mask = _one_token(0.5, 1.0)
    pg, m = POLICY_LOSSES.get("cispo")(old, lp, adv, mask, clip_ratio_low=low, clip_ratio_high=4.0)
    pg.sum().backward()
    assert pg.item() == pytest.approx(-weight * math.log(0.5), abs=1e-6)
    assert lp.grad.item() == pytest.approx(-weight, abs=1e-6)
    assert m["pg_clipfrac_lower"].item() == (1.0 if low < 1 else 0.0)


def _verl_singleton_reference(
    scores: list[float], index: list, estimator: str, norm: bool, eps: float = 1e-6
) -> list[float]:
    """verl's per-group loops, written out: a group of one has mean 0 (GRPO: std 1)."""
    groups: dict = defaultdict(list)
    for s, k in zip(scores, index):
        groups[k].append(s)
    out = []
    for s, k in zip(scores, index):
        g = torch.tensor(groups[k], dtype=torch.float64)
        if estimator == "grpo":
            mean, std = (0.0, 1.0) if len(g) == 1 else (g.mean().item(), g.std().item())
            out.append((s - mean) / (std + eps) if norm else s - mean)
        else:
            n = len(g)
            out.append(s if n == 1 else s * n / (n - 1) - g.mean().item() * n / (n - 1))
    return out


@pytest.mark.parametrize(("estimator", "norm"), [("grpo", True), ("grpo", False), ("rloo", True)])
def test_groups_of_one_as_verl(estimator: str, norm: bool) -> None:
    # rollout.n = 1: every group is a singleton (by hand: GRPO s / (1 + 1e-6), Dr.GRPO and RLOO s)
    scores = [0.7, -1.5, 0.0, 2.0]
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor(scores)
    adv, _ = compute_advantage(
        estimator,
        token_level_rewards=rewards,
        response_mask=torch.ones(4, 3),
        index=np.array(["a", "b", "c", "d"], dtype=object),
        norm_adv_by_std_in_grpo=norm,
    )
    by_hand = [s / (1 + 1e-6) if (estimator, norm) == ("grpo", True) else s for s in scores]
    assert adv[:, 0].tolist() == pytest.approx(by_hand, abs=1e-6)
    # ragged batch (a pair, a singleton, a zero-spread pair), against verl's loops on 3 random draws
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        scores = torch.randn(5, generator=gen).tolist()
        scores[4] = scores[3]
        index = np.array(["p", "p", "s", "z", "z"], dtype=object)
        rewards = torch.zeros(5, 2)
        rewards[:, 0] = torch.tensor(scores)
        adv, _ = compute_advantage(
            estimator,
            token_level_rewards=rewards,
            response_mask=torch.ones(5, 2),
            index=index,
            norm_adv_by_std_in_grpo=norm,
        )
        assert adv[:, 0].tolist() == pytest.approx(
            _verl_singleton_reference(scores, list(index), estimator, norm), abs=1e-5
        )
