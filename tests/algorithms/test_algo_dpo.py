"""DPO / cDPO / IPO and the SFT token loss against values computed by hand."""

from __future__ import annotations

import pytest
import torch

from verl.algorithms.dpo import dpo_loss, dpo_metric_sums
from verl.algorithms.sft import sft_loss

# Two pairs, beta = 0.1.
#   pair 1: pi_c=-1.0 pi_r=-3.0 ref_c=-2.0 ref_r=-2.5 -> h = (-1+3) - (-2+2.5) = 2.0 - 0.5 = 1.5
#   pair 2: pi_c=-4.0 pi_r=-2.0 ref_c=-3.0 ref_r=-3.0 -> h = (-4+2) - 0 = -2.0
PI_C, PI_R = torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -2.0])
REF_C, REF_R = torch.tensor([-2.0, -3.0]), torch.tensor([-2.5, -3.0])


def test_dpo_sigmoid_two_pairs_by_hand() -> None:
    # -log sigmoid(0.15) = log(1 + e^-0.15) = log(1.8607080) = 0.6209570
    # -log sigmoid(-0.2) = log(1 + e^0.2)   = log(2.2214028) = 0.7981389
    losses = dpo_loss(PI_C, PI_R, REF_C, REF_R, beta=0.1)
    torch.testing.assert_close(losses, torch.tensor([0.6209570, 0.7981389]), atol=1e-6, rtol=0)
    assert float(losses.mean()) == pytest.approx(0.7095480, abs=1e-6)


def test_cdpo_label_smoothing_by_hand() -> None:
    # eps = 0.1: 0.9 * (-log s(bh)) + 0.1 * (-log s(-bh))
    #   pair 1: 0.9 * 0.6209570 + 0.1 * 0.7709570 = 0.6359570
    #   pair 2: 0.9 * 0.7981389 + 0.1 * 0.5981389 = 0.7781389
    losses = dpo_loss(PI_C, PI_R, REF_C, REF_R, beta=0.1, label_smoothing=0.1)
    torch.testing.assert_close(losses, torch.tensor([0.6359570, 0.7781389]), atol=1e-6, rtol=0)


def test_ipo_by_hand() -> None:
    # (h - 1/(2*0.1))^2 = (1.5 - 5)^2 = 12.25 ; (-2 - 5)^2 = 49
    losses = dpo_loss(PI_C, PI_R, REF_C, REF_R, beta=0.1, loss_type="ipo")
    torch.testing.assert_close(losses, torch.tensor([12.25, 49.0]))


def test_dpo_gradient_direction() -> None:
    # d(-log s(b h))/d pi_c = -b * sigmoid(-b h) < 0: descending raises the chosen log-prob
    pi_c = PI_C.clone().requires_grad_(True)
    dpo_loss(pi_c, PI_R, REF_C, REF_R, beta=0.1).sum().backward()
    expected = -0.1 * torch.sigmoid(-0.1 * torch.tensor([1.5, -2.0]))
    torch.testing.assert_close(pi_c.grad, expected)


def test_dpo_metrics_by_hand() -> None:
    # r_c = 0.1 * (pi_c - ref_c) = [0.1, -0.1]; r_r = 0.1 * (pi_r - ref_r) = [-0.05, 0.1]
    m = dpo_metric_sums(PI_C, PI_R, REF_C, REF_R, beta=0.1)
    assert m["rewards/chosen"] == pytest.approx(0.0, abs=1e-7)
    assert m["rewards/rejected"] == pytest.approx(0.05, abs=1e-7)
    assert m["rewards/accuracies"] == 1.0  # pair 1 only (0.1 > -0.05; -0.1 < 0.1)
    assert m["rewards/margins"] == pytest.approx(0.15 - 0.2, abs=1e-7)
    assert m["logps/chosen"] == pytest.approx(-5.0)
    assert m["logps/rejected"] == pytest.approx(-5.0)


@pytest.mark.parametrize(
    "kwargs",
    [dict(loss_type="kto"), dict(beta=0.0), dict(label_smoothing=0.5), dict(loss_type="ipo", label_smoothing=0.1)],
)
def test_dpo_rejects_bad_settings(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        dpo_loss(PI_C, PI_R, REF_C, REF_R, **kwargs)


def test_sft_loss_global_token_mean_by_hand() -> None:
    # micro 1: one response token, logp -2.0 ; micro 2: three tokens, logp -1.0 each.
    # Global token mean = (2 + 3) / 4 = 1.25 ; a per-micro mean averaged would give 1.5 (B07).
    lp1, m1 = torch.tensor([[-9.0, -2.0]]), torch.tensor([[0, 1]])
    lp2, m2 = torch.tensor([[-1.0, -1.0, -1.0, -7.0]]), torch.tensor([[1, 1, 1, 0]])
    l1, s1 = sft_loss(lp1, m1, global_token_count=4)
    l2, s2 = sft_loss(lp2, m2, global_token_count=4)
    assert float(l1 + l2) == pytest.approx(1.25)
    assert s1["tokens"] + s2["tokens"] == 4
    with pytest.raises(ValueError):
        sft_loss(lp1, m1, global_token_count=0)
