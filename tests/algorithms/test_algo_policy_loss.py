"""Policy losses: hand-computed per-token values, gradients, clip fractions, signature."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from verl.algorithms import POLICY_LOSSES


def _inputs(ratios: list[float], advantages: list[float], old: float = -1.0):
    """One row; one padded extra token holding garbage (inf log-prob, huge advantage)."""
    old_lp = torch.tensor([[old] * len(ratios) + [0.0]])
    lp = torch.tensor([[old + math.log(r) for r in ratios] + [float("inf")]], requires_grad=True)
    adv = torch.tensor([advantages + [1e9]])
    mask = torch.tensor([[1.0] * len(ratios) + [0.0]])
    return old_lp, lp, adv, mask


def test_vanilla_ppo_clip_and_dual_clip_hand_values() -> None:
    # tokens: (r, A) = (1.5, +1) clipped | (0.5, +1) free | (1.5, -1) free | (4, -1) dual | (0.5, -1) clipped
    old, lp, adv, mask = _inputs([1.5, 0.5, 1.5, 4.0, 0.5], [1.0, 1.0, -1.0, -1.0, -1.0])
    pg, m = POLICY_LOSSES.get("vanilla")(old, lp, adv, mask)
    torch.testing.assert_close(pg, torch.tensor([[-1.2, -0.5, 1.5, 3.0, 0.8, 0.0]]))
    assert m["pg_clipfrac"].item() == pytest.approx(0.4)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(0.2)
    kl = -(2 * math.log(1.5) + 2 * math.log(0.5) + math.log(4.0)) / 5
    assert m["ppo_kl"].item() == pytest.approx(kl, abs=1e-6)
    pg.sum().backward()
    # d/dlogp (-A r) = -A r where the unclipped branch is active, 0 where clipped / dual-clipped
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, -0.5, 1.5, 0.0, 0.0, 0.0]]))


def test_vanilla_clip_higher_asymmetric() -> None:
    old, lp, adv, mask = _inputs([1.5, 1.25, 0.75], [1.0, 1.0, -1.0])
    pg, m = POLICY_LOSSES.get("vanilla")(old, lp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    # 1.5 -> 1.28 ; 1.25 inside [0.8, 1.28] ; 0.75 with A<0 -> max(0.75, 0.8) = 0.8
    torch.testing.assert_close(pg[:, :3], torch.tensor([[-1.28, -1.25, 0.8]]))
    pg_sym, _ = POLICY_LOSSES.get("vanilla")(old, lp, adv, mask)
    torch.testing.assert_close(pg_sym[:, :3], torch.tensor([[-1.2, -1.2, 0.8]]))
    assert m["pg_clipfrac"].item() == pytest.approx(2 / 3)


def test_vanilla_log_ratio_clamped_and_dual_clip_validated() -> None:
    old = torch.tensor([[0.0]])
    lp = torch.tensor([[500.0]])
    pg, _ = POLICY_LOSSES.get("vanilla")(old, lp, torch.tensor([[-1.0]]), torch.ones(1, 1), clip_ratio_c=1e12)
    assert pg.item() == pytest.approx(math.exp(20.0), rel=1e-5)  # not inf
    with pytest.raises(ValueError, match="clip_ratio_c"):
        POLICY_LOSSES.get("vanilla")(old, lp, torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=1.0)


def test_gspo_sequence_level_ratio() -> None:
    old = torch.zeros(2, 3)
    lp = torch.tensor([[0.1, 0.3, 0.0], [-0.1, 0.1, 50.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 0.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    pg, m = POLICY_LOSSES.get("gspo")(old, lp, adv, mask)
    # row 0: s = exp(mean(0.1, 0.3)) = e^0.2 = 1.2214 > 1.2 -> clipped: -1.2 on both tokens
    # row 1: s = exp(0) = 1 on both tokens (token ratios differ, the sequence ratio does not): +2
    torch.testing.assert_close(pg, torch.tensor([[-1.2, -1.2, 0.0], [2.0, 2.0, 0.0]]))
    assert m["pg_clipfrac"].item() == pytest.approx(0.5)
    pg.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.0, 0.0], [2.0, 2.0, 0.0]]))


def test_gpg_loss() -> None:
    old, lp, adv, mask = _inputs([1.0, 2.0], [2.0, -1.0], old=-0.5)
    pg, m = POLICY_LOSSES.get("gpg")(old, lp, adv, mask)
    torch.testing.assert_close(pg, torch.tensor([[1.0, -0.5 + math.log(2.0), 0.0]]))  # -A logp
    pg.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-2.0, 1.0, 0.0]]))
    assert m["pg_clipfrac"].item() == 0.0


def test_cispo_clipped_detached_weight_keeps_gradients() -> None:
    old = torch.tensor([[-1.0, -1.0, -2.0]])
    lp = (old + torch.log(torch.tensor([[1.5, 0.5, 1.0]]))).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    pg, m = POLICY_LOSSES.get("cispo")(old, lp, adv, torch.ones(1, 3))
    lp0, lp1 = -1.0 + math.log(1.5), -1.0 + math.log(0.5)
    torch.testing.assert_close(pg, torch.tensor([[-1.2 * lp0, -0.8 * lp1, -2.0]]))
    pg.sum().backward()
    # every token keeps a gradient, weighted by the clipped IS weight: -w A
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.2, -0.8, 1.0]]))
    assert m["pg_clipfrac"].item() == pytest.approx(1 / 3)
    assert m["pg_clipfrac_lower"].item() == pytest.approx(1 / 3)


def _cov_inputs():
    # A = [3, -1, -1, -1] (mean 0); logp = [0, -1, -1, -2] (mean -1) -> cov = [3, 0, 0, 1]
    lp = torch.tensor([[0.0, -1.0, -1.0, -2.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[3.0, -1.0, -1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    return lp, adv, mask


def test_clip_cov_drops_high_covariance_token() -> None:
    lp, adv, mask = _cov_inputs()
    pg, m = POLICY_LOSSES.get("clip_cov")(
        lp.detach(), lp, adv, mask, clip_cov_ratio=0.2, clip_cov_lb=1.0, clip_cov_ub=5.0
    )
    # only token 0 has cov in (1, 5); ratio = 1 so loss = -A elsewhere
    torch.testing.assert_close(pg, torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]]))
    assert m["pg_clipfrac"].item() == pytest.approx(0.25)
    pg.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]]))


def test_clip_cov_drops_exactly_k_of_many_candidates() -> None:
    gen = torch.Generator().manual_seed(0)
    adv = torch.cat([torch.full((1, 50), 2.0), torch.full((1, 50), -2.0)], dim=1)
    lp = torch.cat([torch.full((1, 50), 0.0), torch.full((1, 50), -1.0)], dim=1)
    mask = torch.ones(1, 100)
    # cov = 2 * 0.5 = 1.0 everywhere -> use window (0.5, 5): all 100 are candidates, k = 10
    pg, m = POLICY_LOSSES.get("clip_cov")(
        lp, lp.clone(), adv, mask, clip_cov_ratio=0.1, clip_cov_lb=0.5, clip_cov_ub=5.0, generator=gen
    )
    assert int((pg == 0).sum()) == 10 and m["pg_clipfrac"].item() == pytest.approx(0.1)


def test_kl_cov_penalises_top_covariance_token() -> None:
    lp, adv, mask = _cov_inputs()
    old = lp.detach() - 0.1  # log ratio 0.1 everywhere
    pg, m = POLICY_LOSSES.get("kl_cov")(old, lp, adv, mask, kl_cov_ratio=0.25, ppo_kl_coef=0.5)
    r = math.exp(0.1)
    torch.testing.assert_close(pg, torch.tensor([[-3 * r + 0.05, r, r, r, 0.0]]))
    assert m["ppo_kl_abs"].item() == pytest.approx(0.1, abs=1e-6)
    assert m["ppo_kl"].item() == pytest.approx(-0.1, abs=1e-6)


def test_every_policy_loss_same_signature_metrics_and_zero_padding() -> None:
    assert set(POLICY_LOSSES.names()) == {
        "vanilla",
        "gspo",
        "gpg",
        "cispo",
        "clip_cov",
        "kl_cov",
        "sapo",
        "geo_mean",
        "dppo_tv",
        "dppo_kl",
        "dro",
        "bypass_mode",
    }
    ref = list(inspect.signature(POLICY_LOSSES.get("vanilla")).parameters.values())
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float32)
    for name in POLICY_LOSSES.names():
        fn = POLICY_LOSSES.get(name)
        params = list(inspect.signature(fn).parameters.values())
        assert [(p.name, p.kind, p.default) for p in params] == [(p.name, p.kind, p.default) for p in ref]
        lp = (old + 0.3 * torch.randn(3, 5, generator=gen)).requires_grad_()
        adv = torch.randn(3, 5, generator=gen)
        pg, m = fn(old, lp, adv, mask, generator=torch.Generator().manual_seed(0), dro_beta=0.1)
        assert pg.shape == (3, 5) and pg[mask == 0].abs().sum() == 0, name
        assert {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"} <= set(m), name
        assert all(not v.requires_grad and v.dim() == 0 for v in m.values()), name
        pg.sum().backward()
        assert torch.isfinite(lp.grad).all() and lp.grad[mask == 0].abs().sum() == 0, name
