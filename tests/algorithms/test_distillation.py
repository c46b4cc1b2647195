"""Distillation losses: hand-computed values, and verl's formulas on random batches computed independently."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.distillation import (
    DISTILLATION_LOSSES,
    DistillationInputs,
    clamp_distillation_losses,
    distillation_advantages,
    forward_kl_topk,
    topk_log_probs,
)
from verl.config.checks_distill import ESTIMATOR_LOSS_MODES, LOSS_MODES, TOPK_LOSS_MODES


def _est(mode: str, s: list[float], t: list[float]) -> torch.Tensor:
    inputs = DistillationInputs(student_log_probs=torch.tensor([s]), teacher_log_probs=torch.tensor([t]))
    return DISTILLATION_LOSSES[mode](inputs, loss_mode=mode)[0][0]


def test_registry_names_match_the_config_choices():
    assert sorted(DISTILLATION_LOSSES.names()) == sorted(LOSS_MODES)
    assert all(DISTILLATION_LOSSES[m].uses_topk for m in TOPK_LOSS_MODES)
    assert not any(DISTILLATION_LOSSES[m].uses_topk for m in ESTIMATOR_LOSS_MODES)
    with pytest.raises(KeyError, match="valid names"):
        DISTILLATION_LOSSES["forward_kl_top"]


def test_estimators_hand_values():
    # Δ = log π_s − log π_t = −0.5 − (−1.0) = 0.5
    s, t = [-0.5, -2.0], [-1.0, -1.0]
    assert _est("k1", s, t).tolist() == pytest.approx([0.5, -1.0])
    assert _est("kl", s, t).tolist() == pytest.approx([0.5, -1.0])
    assert _est("abs", s, t).tolist() == pytest.approx([0.5, 1.0])
    assert _est("k2", s, t).tolist() == pytest.approx([0.125, 0.5])
    # k3 = exp(−Δ) + Δ − 1: exp(−0.5) − 0.5 = 0.1065307, exp(1) − 2 = 0.7182818
    assert _est("k3", s, t).tolist() == pytest.approx([0.10653066, 0.71828183])
    assert _est("low_var_kl", [-3.0], [-0.2]).tolist() == pytest.approx([10.0])  # 12.6446 clamped at 10


def test_topk_forward_kl_hand_values():
    # student softmax [0.25, 0.25, 0.5]; teacher top-2: id 2 (0.6), id 0 (0.3)
    logits = torch.log(torch.tensor([[[1.0, 1.0, 2.0]]]))
    ids = torch.tensor([[[2, 0]]])
    t = torch.log(torch.tensor([[[0.6, 0.3]]]))
    inputs = DistillationInputs(student_logits=logits, teacher_topk_log_probs=t, teacher_topk_ids=ids)
    loss, metrics = DISTILLATION_LOSSES["forward_kl_topk"](inputs, loss_mode="forward_kl_topk")
    # 0.6 ln(0.6/0.5) + 0.3 ln(0.3/0.25) = 0.9 ln 1.2
    assert loss.item() == pytest.approx(0.9 * math.log(1.2))
    assert metrics["student_mass"].item() == pytest.approx(0.75)
    assert metrics["teacher_mass"].item() == pytest.approx(0.9)
    # log_prob_min_clamp=-1: ln 0.3 and ln 0.25 both become -1, their term vanishes
    clamped, _ = DISTILLATION_LOSSES["forward_kl_topk"](inputs, loss_mode="forward_kl_topk", log_prob_min_clamp=-1.0)
    assert clamped.item() == pytest.approx(0.6 * math.log(1.2))


def test_topk_truncated_sum_below_zero_is_clamped():
    # teacher top-1 id 0 with p 0.1 where the student has 0.25: 0.1 ln(0.4) < 0
    logits = torch.log(torch.tensor([[[1.0, 1.0, 2.0]]]))
    raw, _, _ = forward_kl_topk(topk_log_probs(logits, torch.tensor([[[0]]])), torch.log(torch.tensor([[[0.1]]])))
    assert raw.item() == pytest.approx(0.1 * math.log(0.4))
    inputs = DistillationInputs(
        student_logits=logits,
        teacher_topk_log_probs=torch.log(torch.tensor([[[0.1]]])),
        teacher_topk_ids=torch.tensor([[[0]]]),
    )
    assert DISTILLATION_LOSSES["forward_kl_topk"](inputs, loss_mode="forward_kl_topk")[0].item() == 0.0


def test_clamp_and_advantages():
    losses = torch.tensor([[12.0, -15.0, 0.5]])
    assert clamp_distillation_losses(losses, 10.0).tolist() == [[10.0, -10.0, 0.5]]
    assert clamp_distillation_losses(losses, None) is losses
    adv = distillation_advantages(torch.tensor([[0.5, -1.0, 3.0]], requires_grad=True), torch.tensor([[1, 1, 0]]))
    assert adv.tolist() == [[-0.5, 1.0, 0.0]] and not adv.requires_grad


# verl's formulas (verl/trainer/ppo/core_algos.py kl_penalty, verl/trainer/ppo/distillation/fsdp/losses.py),
# written out here independently of the package's code
def _verl_estimator(s: torch.Tensor, t: torch.Tensor, mode: str) -> torch.Tensor:
    if mode in ("kl", "k1"):
        return s - t
    if mode == "abs":
        return (s - t).abs()
    if mode in ("mse", "k2"):
        return 0.5 * (s - t).square()
    kl = torch.clamp(t - s, min=-20, max=20)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


def _verl_topk(logits: torch.Tensor, t_lp: torch.Tensor, t_ids: torch.Tensor, min_clamp: float | None) -> torch.Tensor:
    s_lp = torch.gather(torch.nn.functional.log_softmax(logits.double(), dim=-1), -1, t_ids)
    t_lp = t_lp.double()
    if min_clamp is not None:
        s_lp, t_lp = s_lp.clamp_min(min_clamp), t_lp.clamp_min(min_clamp)
    return (t_lp.exp() * (t_lp - s_lp)).sum(-1).clamp_min(0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_verl_formulas_on_random_batches(seed: int):
    g = torch.Generator().manual_seed(seed)
    B, R, V, K = 3, 5, 11, 4
    s = torch.log_softmax(torch.randn(B, R, V, generator=g) * 2, -1)[..., 0]
    t = torch.log_softmax(torch.randn(B, R, V, generator=g) * 2, -1)[..., 0]
    for mode in ESTIMATOR_LOSS_MODES:
        ours, _ = DISTILLATION_LOSSES[mode](
            DistillationInputs(student_log_probs=s, teacher_log_probs=t), loss_mode=mode
        )
        torch.testing.assert_close(ours.double(), _verl_estimator(s.double(), t.double(), mode), rtol=1e-5, atol=1e-6)
    logits = torch.randn(B, R, V, generator=g) * 3
    teacher = torch.log_softmax(torch.randn(B, R, V, generator=g) * 3, -1).topk(K, dim=-1)
    for clamp in (None, -3.0):
        for chunk in (None, 4):
            inputs = DistillationInputs(
                student_logits=logits, teacher_topk_log_probs=teacher.values, teacher_topk_ids=teacher.indices
            )
            ours, _ = DISTILLATION_LOSSES["forward_kl_topk"](
                inputs, loss_mode="forward_kl_topk", log_prob_min_clamp=clamp, chunk_size=chunk
            )
            torch.testing.assert_close(
                ours.double(), _verl_topk(logits, teacher.values, teacher.indices, clamp), rtol=1e-5, atol=1e-6
            )


def test_topk_gradient_reaches_only_the_student_logits():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(2, 3, 7), -1).topk(7, dim=-1)  # K = V: the exact forward KL
    inputs = DistillationInputs(
        student_logits=logits, teacher_topk_log_probs=teacher.values, teacher_topk_ids=teacher.indices
    )
    loss, _ = DISTILLATION_LOSSES["forward_kl_topk"](inputs, loss_mode="forward_kl_topk")
    loss.sum().backward()
    # d KL(p || softmax(z)) / dz = softmax(z) − p
    p = torch.zeros(2, 3, 7).scatter(-1, teacher.indices, teacher.values.exp())
    torch.testing.assert_close(logits.grad, torch.softmax(logits.detach(), -1) - p, rtol=1e-5, atol=1e-6)
