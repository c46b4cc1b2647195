"""KL estimators (B06), straight-through variants, controllers (B33), in-reward KL penalty."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)

K3 = math.exp(-0.5) + 0.5 - 1  # 0.106531


@pytest.mark.parametrize(
    ("names", "value"),
    [(("kl", "k1"), 0.5), (("abs",), 0.5), (("mse", "k2"), 0.125), (("low_var_kl", "k3"), K3)],
)
def test_b06_estimator_values(names: tuple[str, ...], value: float) -> None:
    """B06: logp = -1.0, ref = -1.5."""
    for name in names:
        for variant in (name, name + "+"):
            out = kl_penalty(torch.tensor([-1.0]), torch.tensor([-1.5]), variant)
            assert out.item() == pytest.approx(value, abs=1e-6), variant


def test_b06_estimators_distinct_and_k3_documented_cap() -> None:
    lp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    values = {kl_penalty(lp, ref, n).item() for n in ("kl", "mse", "low_var_kl")}
    assert len(values) == 3 and K3 == pytest.approx(0.106531, abs=1e-6)
    # the abs estimator differs from kl when the difference is negative
    assert kl_penalty(ref, lp, "abs").item() == pytest.approx(0.5)
    assert kl_penalty(ref, lp, "kl").item() == pytest.approx(-0.5)
    # unclamped k3 = e^2.8 - 2.8 - 1 = 12.6446; verl's documented cap is 10
    assert math.exp(2.8) - 3.8 == pytest.approx(12.6446, abs=1e-4)
    assert kl_penalty(torch.tensor([-3.0]), torch.tensor([-0.2]), "k3").item() == pytest.approx(10.0)


def test_k3_never_negative() -> None:
    gen = torch.Generator().manual_seed(0)
    lp, ref = torch.randn(1000, generator=gen) * 5, torch.randn(1000, generator=gen) * 5
    assert (kl_penalty(lp, ref, "k3") >= 0).all()


@pytest.mark.parametrize(
    ("name", "grad"),
    [
        ("k1", 1.0),
        ("abs", 1.0),
        ("k2", 0.5),
        ("k3", 1 - math.exp(-0.5)),
        ("k1+", 0.5),
        ("abs+", 0.5),
        ("k2+", 0.5),
        ("mse+", 0.5),
        ("k3+", 0.5),
        ("low_var_kl+", 0.5),
    ],
)
def test_gradients_and_straight_through(name: str, grad: float) -> None:
    """'+' variants: forward value of the named estimator, gradient of k2 (= logp - ref = 0.5)."""
    lp = torch.tensor([-1.0], requires_grad=True)
    kl_penalty(lp, torch.tensor([-1.5]), name).sum().backward()
    assert lp.grad.item() == pytest.approx(grad, abs=1e-6)


def test_unknown_estimator_raises() -> None:
    for bad in ("k4", "full", "low-var-kl", "k3++", ""):
        with pytest.raises(ValueError, match="valid"):
            kl_penalty(torch.zeros(1), torch.zeros(1), bad)
    assert "k3+" in KL_PENALTY_TYPES and "kl" in KL_PENALTY_TYPES


@pytest.mark.parametrize(("current", "expected"), [(9.0, 0.100512), (3.0, 0.099488), (6.6, 0.100256), (6.0, 0.1)])
def test_b33_adaptive_controller(current: float, expected: float) -> None:
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctrl.update(current, n_steps=256)
    assert ctrl.value == pytest.approx(expected, abs=1e-9)


def test_b33_fixed_controller_never_changes_and_state_roundtrip() -> None:
    fixed = FixedKLController(0.05)
    for kl in (0.0, 100.0, -3.0):
        fixed.update(kl, n_steps=1000)
    assert fixed.value == 0.05
    ctrl = get_kl_controller("adaptive", kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctrl.update(9.0, 256)
    restored = get_kl_controller("adaptive", kl_coef=0.1, target_kl=6.0, horizon=10000)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value == pytest.approx(0.100512)
    f2 = get_kl_controller("fixed", kl_coef=0.3)
    f2.load_state_dict({"value": 0.7})
    assert isinstance(f2, FixedKLController) and f2.value == 0.7


def test_get_kl_controller_errors() -> None:
    with pytest.raises(ValueError, match="fixed, adaptive"):
        get_kl_controller("adaptiv", kl_coef=0.1)
    with pytest.raises(ValueError):
        get_kl_controller("adaptive", kl_coef=0.1, target_kl=6.0, horizon=0)
    with pytest.raises(ValueError):
        get_kl_controller("adaptive", kl_coef=0.1)


def _kl_batch():
    scores = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    old = torch.tensor([[-0.5, -0.5, 1.0, float("nan")], [-1.0, -1.0, -1.0, -1.0]])
    ref = torch.tensor([[-0.7, -0.7, 5.0, 3.0], [-1.1, -1.1, -1.1, -1.1]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    return scores, old, ref, mask


def test_b33_in_reward_kl_zero_on_padding_and_controller_input() -> None:
    scores, old, ref, mask = _kl_batch()
    ctrl = FixedKLController(0.1)
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, ctrl, "kl")
    expected = torch.tensor([[-0.02, 0.98, 0.0, 0.0], [-0.01, -0.01, -0.01, 1.99]])
    torch.testing.assert_close(rewards, expected)
    # per-sequence masked mean KL [0.2, 0.1] -> batch mean 0.15 (B13: 0.2 per token for row 0)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.15, abs=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)


def test_b33_adaptive_controller_fed_per_sequence_kl_with_n_sequences() -> None:
    scores, old, ref, mask = _kl_batch()
    ctrl = AdaptiveKLController(0.1, target_kl=0.1, horizon=10)
    _, metrics = apply_kl_penalty(scores, old, ref, mask, ctrl, "kl")
    # error = clip(0.15 / 0.1 - 1, -0.2, 0.2) = 0.2 ; n_steps = 2 sequences ; mult = 1 + 0.2*2/10
    assert ctrl.value == pytest.approx(0.1 * 1.04)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)  # beta used for these rewards
