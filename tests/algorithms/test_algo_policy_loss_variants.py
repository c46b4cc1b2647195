"""sapo, geo_mean, dppo_tv, dppo_kl, dro and bypass_mode: hand values and verl's formulas.

Each loss is checked (1) against numbers worked out by hand in the comments and (2) against an
independent NumPy reimplementation of verl's formula (``verl.trainer.ppo.core_algos``: per-token
loss times the mask, then verl's aggregation) on three random padded batches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.algorithms import POLICY_LOSSES, agg_loss
from verl.algorithms.policy_loss import loss_agg_mode_for
from verl.algorithms.rollout_correction import RolloutCorrectionParams


def _logs(*probs: float) -> torch.Tensor:
    return torch.log(torch.tensor([list(probs)], dtype=torch.float64))


# ---------------------------------------------------------------- hand-computed values


def test_sapo_hand_values_and_unit_slope_at_ratio_one() -> None:
    # tau_pos = 1, tau_neg = 2; gate f(r) = sigmoid(tau (r - 1)) * 4 / tau; L = -f(r) A
    # t0: A = 1,  r = 1:   f = sigmoid(0) * 4 = 2                 -> L = -2
    # t1: A = -1, r = 2:   f = sigmoid(2) * 2 = 2 * 0.8807971     -> L = +1.7615942
    # t2: A = 2,  r = 0.5: f = sigmoid(-0.5) * 4 = 4 * 0.3775407  -> L = -3.0203255
    # slot 3 is padding. dL/dlog p at t0 = -A * r * f'(1) = -1 * 1 * (0.25 * 4) = -1
    old = torch.log(torch.tensor([[0.4, 0.2, 0.6, 0.3]], dtype=torch.float64))
    lp = (old + torch.log(torch.tensor([[1.0, 2.0, 0.5, 7.0]], dtype=torch.float64))).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 2.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    pg, m = POLICY_LOSSES["sapo"](old, lp, adv, mask, tau_pos=1.0, tau_neg=2.0)
    torch.testing.assert_close(pg, torch.tensor([[-2.0, 1.7615942, -3.0203255, 0.0]], dtype=torch.float64))
    pg[0, 0].backward()
    assert lp.grad[0, 0].item() == pytest.approx(-1.0)
    assert m["pg_clipfrac"].item() == 0.0 and m["pg_clipfrac_lower"].item() == 0.0
    assert loss_agg_mode_for("sapo", "token-mean") == "seq-mean-token-mean"
    with pytest.raises(ValueError, match="tau_pos > 0"):
        POLICY_LOSSES["sapo"](old, lp, adv, mask, tau_pos=0.0)


def test_geo_mean_hand_values() -> None:
    # eps_low = eps_high = 0.2 (log-space bounds).
    # row 0 (2 tokens, A = 1): l = [0.3, -0.1] -> min(l, clip(l)) = [0.2, -0.1]; mean 0.05
    #   s0 = e^0.05 = 1.0512711; L0 = -1 * 1.0512711
    # row 1 (3 tokens, A = -2): l = [0.3, -0.3, 0] -> max(l, clip(l)) = [0.3, -0.2, 0]; mean 0.1/3
    #   s1 = e^(0.0333333) = 1.0338951; L1 = +2 * 1.0338951 = 2.0677902
    # every valid token of a row carries its L_i; seq-mean-token-mean: (L0 + L1) / 2 = 0.5082596
    # clipped tokens: row0 t0 (A > 0); row1 t0, t1 (A < 0) -> clipfrac 1/5, lower 2/5
    old = torch.zeros(2, 3, dtype=torch.float64)
    lp = torch.tensor([[0.3, -0.1, 9.0], [0.3, -0.3, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, 0.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    pg, m = POLICY_LOSSES["geo_mean"](old, lp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    l0, l1 = -1.0512711, 2.0677902
    torch.testing.assert_close(pg, torch.tensor([[l0, l0, 0.0], [l1, l1, l1]], dtype=torch.float64))
    assert agg_loss(pg, mask, loss_agg_mode_for("geo_mean", "token-mean")).item() == pytest.approx(0.5082596, abs=1e-6)
    assert m["pg_clipfrac"].item() == pytest.approx(1 / 5) and m["pg_clipfrac_lower"].item() == pytest.approx(2 / 5)


# DPPO tokens (p_old, p, A), thresholds 0.2 / 0.2, C = 3:
#   t0 (0.5, 0.6, +1):  TV 0.1 <= 0.2 in; KL 0.5 ln(5/6) + 0.5 ln(5/4) = 0.0204 in.
#                       r = 1.2, L = -1 * 1.2 * ln 0.6 = 0.6129907
#   t1 (0.5, 0.8, +1):  TV 0.3 out; KL 0.5 ln(0.625) + 0.5 ln(2.5) = 0.2231 > 0.2 and p > p_old: out
#   t2 (0.5, 0.2, -1):  TV -0.3 out; KL 0.2231 > 0.2 and p < p_old: out
#   t3 (0.1, 0.4, -1):  TV +0.3 >= -0.2 in; KL: p >= p_old in. r = 4 -> min(r, 3) = 3,
#                       L = +1 * 3 * ln 0.4 = -2.7488722 (truncated: counts in clipfrac_lower)
#   t4 (0.8, 0.99, +1): TV 0.19 in, r = 1.2375, L = -1.2375 ln 0.99 = 0.0124373;
#                       KL 0.8 ln(0.8/0.99) + 0.2 ln(0.2/0.01) = 0.4287 > 0.2 and p > p_old: out
DPPO_OLD, DPPO_NEW, DPPO_ADV = (0.5, 0.5, 0.5, 0.1, 0.8), (0.6, 0.8, 0.2, 0.4, 0.99), [[1.0, 1.0, -1.0, -1.0, 1.0]]


@pytest.mark.parametrize(
    "name, expected, clipfrac",
    [
        ("dppo_tv", [0.6129907, 0.0, 0.0, -2.7488722, 0.0124373], 2 / 5),
        ("dppo_kl", [0.6129907, 0.0, 0.0, -2.7488722, 0.0], 3 / 5),
    ],
)
def test_dppo_hand_values(name: str, expected: list[float], clipfrac: float) -> None:
    old, lp = _logs(*DPPO_OLD), _logs(*DPPO_NEW).requires_grad_()
    adv = torch.tensor(DPPO_ADV, dtype=torch.float64)
    pg, m = POLICY_LOSSES[name](
        old, lp, adv, torch.ones(1, 5), clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0
    )
    torch.testing.assert_close(pg, torch.tensor([expected], dtype=torch.float64), atol=1e-6, rtol=0)
    assert m["pg_clipfrac"].item() == pytest.approx(clipfrac) and m["pg_clipfrac_lower"].item() == pytest.approx(1 / 5)
    pg.sum().backward()
    # the weight is detached: dL/dlog p = -A * min(r, C) in the region (t3: +3), 0 outside (t1)
    assert lp.grad[0, 3].item() == pytest.approx(3.0) and lp.grad[0, 1].item() == 0.0


def test_dro_hand_values_and_required_beta() -> None:
    # beta = 0.5, L = -(A log p - beta/2 (log p - log p_old)^2)
    # t0: lp -1, old -1.2, A 1:    -(-1 - 0.25 * 0.04) = 1.01;  dL/dlp = -(A - beta d) = -(1 - 0.1) = -0.9
    # t1: lp -2, old -1,   A -0.5: -(1 - 0.25 * 1) = -0.75;     dL/dlp = -(-0.5 + 0.5) = 0
    lp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.2, -1.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -0.5]], dtype=torch.float64)
    pg, _ = POLICY_LOSSES["dro"](old, lp, adv, torch.ones(1, 2), dro_beta=0.5)
    torch.testing.assert_close(pg, torch.tensor([[1.01, -0.75]], dtype=torch.float64))
    pg.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.9, 0.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="dro_beta > 0"):
        POLICY_LOSSES["dro"](old, lp, adv, torch.ones(1, 2))


def test_bypass_mode_reinforce_hand_values_with_is_and_rejection() -> None:
    # old_log_prob = rollout log-probs; pi_theta = [0.5, 0.9], pi_rollout = [0.2, 0.9]: rho = [2.5, 1]
    # token IS, C = 2: w = [2, 1]; L = -A w log pi: t0 -(1)(2) ln 0.5 = 1.3862944; t1 -(-1)(1) ln 0.9 = -0.1053605
    # with token_k1 RS keeping rho in [0.5, 2]: t0 (rho 2.5) is rejected -> 0
    lp, rollout = _logs(0.5, 0.9).requires_grad_(), _logs(0.2, 0.9)
    adv, mask = torch.tensor([[1.0, -1.0]], dtype=torch.float64), torch.ones(1, 2)
    is_only = RolloutCorrectionParams(rollout_is="token", is_threshold=2.0)
    pg, m = POLICY_LOSSES["bypass_mode"](rollout, lp, adv, mask, loss_type="reinforce", rollout_correction=is_only)
    torch.testing.assert_close(pg, torch.tensor([[1.3862944, -0.1053605]], dtype=torch.float64))
    assert m["rollout_corr/rollout_is_max"].item() == pytest.approx(2.0)
    pg.sum().backward()  # the weight is detached: dL/dlog p = -A w
    torch.testing.assert_close(lp.grad, torch.tensor([[-2.0, 1.0]], dtype=torch.float64))
    both = RolloutCorrectionParams(rollout_is="token", is_threshold=2.0, rollout_rs="token_k1", rs_low=0.5, rs_high=2.0)
    pg, _ = POLICY_LOSSES["bypass_mode"](
        rollout, lp.detach(), adv, mask, loss_type="reinforce", rollout_correction=both
    )
    torch.testing.assert_close(pg, torch.tensor([[0.0, -0.1053605]], dtype=torch.float64))
    with pytest.raises(ValueError, match="loss_type"):
        POLICY_LOSSES["bypass_mode"](rollout, lp, adv, mask, loss_type="ppo")


def test_bypass_mode_ppo_clip_is_vanilla_on_the_kept_tokens() -> None:
    gen = torch.Generator().manual_seed(3)
    old, adv = (
        torch.randn(4, 6, generator=gen, dtype=torch.float64) - 1,
        torch.randn(4, 6, generator=gen, dtype=torch.float64),
    )
    lp = old + 0.3 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = (torch.arange(6) < torch.tensor([[6], [4], [2], [5]])).float()
    kw = dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    pg, _ = POLICY_LOSSES["bypass_mode"](old, lp, adv, mask, **kw)
    ref, _ = POLICY_LOSSES["vanilla"](old, lp, adv, mask, **kw)
    torch.testing.assert_close(pg, ref, rtol=0, atol=0)


# ---------------------------------------------------------------- verl's formulas, independently


def _batch(seed: int) -> tuple[np.ndarray, ...]:
    """A random padded batch: old / new log-probs, advantages, 0/1 mask (every row >= 1 token)."""
    rng = np.random.default_rng(seed)
    b, r = 5, 7
    lengths = rng.integers(1, r + 1, size=b)
    mask = (np.arange(r)[None, :] < lengths[:, None]).astype(np.float64)
    old = np.log(rng.uniform(0.05, 0.95, size=(b, r)))
    new = old + rng.normal(0, 0.4, size=(b, r))
    new = np.minimum(new, -1e-3)  # probabilities below 1
    adv = rng.normal(size=(b, r))
    adv[::2] = adv[::2, :1]  # sequence-level advantages in some rows
    return old, new, adv, mask


def _token_mean(loss: np.ndarray, mask: np.ndarray) -> float:
    return float((loss * mask).sum() / mask.sum())


def _seq_mean_token_mean(loss: np.ndarray, mask: np.ndarray) -> float:
    return float(np.mean([(loss[i] * mask[i]).sum() / mask[i].sum() for i in range(len(loss))]))


def _verl_sapo(old, new, adv, mask, tau_pos=1.0, tau_neg=1.05):
    out = np.zeros_like(old)
    for i in range(old.shape[0]):
        for t in range(old.shape[1]):
            r = math.exp(min(max(new[i, t] - old[i, t], -20), 20))
            tau = tau_pos if adv[i, t] > 0 else tau_neg
            out[i, t] = -(4.0 / tau) / (1 + math.exp(-tau * (r - 1))) * adv[i, t]
    return out, _seq_mean_token_mean(out, mask), {}


def _verl_geo_mean(old, new, adv, mask, low=0.2, high=0.28):
    seq_losses, clipped_pos, clipped_neg = [], 0.0, 0.0
    for i in range(old.shape[0]):
        n, acc, adv_sum = mask[i].sum(), 0.0, 0.0
        for t in range(old.shape[1]):
            lr, a = new[i, t] - old[i, t], adv[i, t]
            lc = min(max(lr, -low), high)
            s = float(np.sign(a))
            acc += s * min(s * lr, s * lc) * mask[i, t]
            adv_sum += a * mask[i, t]
            if lr != lc and mask[i, t]:
                clipped_pos += a > 0
                clipped_neg += a < 0
        seq_losses.append(-(adv_sum / (n + 1e-8)) * math.exp(acc / (n + 1e-8)))
    metrics = {"pg_clipfrac": clipped_pos / mask.sum(), "pg_clipfrac_lower": clipped_neg / mask.sum()}
    return None, float(np.mean(seq_losses)), metrics


def _verl_dppo(kind: str):
    def loss(old, new, adv, mask, low=0.2, high=0.28, c=3.0):
        out, outside, truncated = np.zeros_like(old), 0.0, 0.0
        for i in range(old.shape[0]):
            for t in range(old.shape[1]):
                r = math.exp(min(max(new[i, t] - old[i, t], -20), 20))
                p, q = math.exp(new[i, t]), math.exp(old[i, t])
                if kind == "tv":
                    ok = (p - q <= high) if adv[i, t] > 0 else (p - q >= -low)
                else:
                    kl = q * (old[i, t] - new[i, t]) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
                    ok = (kl <= high or p <= q) if adv[i, t] > 0 else (kl <= low or p >= q)
                out[i, t] = -adv[i, t] * min(r, c) * new[i, t] * float(ok)
                outside += (not ok) * mask[i, t]
                truncated += (r > c and ok) * mask[i, t]
        metrics = {"pg_clipfrac": outside / mask.sum(), "pg_clipfrac_lower": truncated / mask.sum()}
        return out, _token_mean(out, mask), metrics

    return loss


def _verl_dro(old, new, adv, mask, beta=0.3):
    out = np.zeros_like(old)
    for i in range(old.shape[0]):
        for t in range(old.shape[1]):
            out[i, t] = -(new[i, t] * adv[i, t] - 0.5 * beta * (new[i, t] - old[i, t]) ** 2)
    return out, _token_mean(out, mask), {}


REFERENCES = {
    "sapo": _verl_sapo,
    "geo_mean": _verl_geo_mean,
    "dppo_tv": _verl_dppo("tv"),
    "dppo_kl": _verl_dppo("kl"),
    "dro": _verl_dro,
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_an_independent_implementation_of_verls_formula(name: str, seed: int) -> None:
    old, new, adv, mask = _batch(seed)
    ref_tokens, ref_loss, ref_metrics = REFERENCES[name](old, new, adv, mask)
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    pg, metrics = POLICY_LOSSES[name](
        t(old),
        t(new),
        t(adv),
        t(mask),
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        tau_pos=1.0,
        tau_neg=1.05,
        dro_beta=0.3,
    )
    if ref_tokens is not None:
        torch.testing.assert_close(pg, t(ref_tokens * mask), rtol=1e-9, atol=1e-9)
    loss = agg_loss(pg, t(mask), loss_agg_mode_for(name, "token-mean"))
    assert loss.item() == pytest.approx(ref_loss, rel=1e-7, abs=1e-9)
    for key, value in ref_metrics.items():
        assert metrics[key].item() == pytest.approx(value, abs=1e-6), key  # metrics are float32
    assert (pg[t(mask) == 0] == 0).all()


def test_verl_signature_lookup_reads_the_variants_settings_from_verls_config() -> None:
    from types import SimpleNamespace

    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    # dro through verl's get_policy_loss_fn(name)(..., config): the hand values of the dro test above,
    # token-mean (1.01 - 0.75) / 2 = 0.13; sapo: verl's seq-mean-token-mean whatever loss_agg_mode says
    config = SimpleNamespace(clip_ratio=0.2, policy_loss=SimpleNamespace(dro_beta=0.5), tau_pos=1.0, tau_neg=2.0)
    lp, old = torch.tensor([[-1.0, -2.0]], dtype=torch.float64), torch.tensor([[-1.2, -1.0]], dtype=torch.float64)
    loss, _ = get_policy_loss_fn("dro")(
        old, lp, torch.tensor([[1.0, -0.5]], dtype=torch.float64), torch.ones(1, 2), "token-mean", config
    )
    assert loss.item() == pytest.approx(0.13)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, 0.0, 0.0]], dtype=torch.float64)
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    loss, _ = get_policy_loss_fn("sapo")(zeros, zeros, adv, mask, "token-mean", config)
    # ratio 1: L = -(2 / tau) A -> row 0: -2 per token, row 1: +1 -> seq-mean (-2 + 1) / 2 = -0.5 (token-mean: -1.25)
    assert loss.item() == pytest.approx(-0.5)
