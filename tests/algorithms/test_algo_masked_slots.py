"""Masked slots never matter: NaN / +inf / -inf wherever ``response_mask == 0`` changes nothing.

Every registered advantage estimator, policy loss and KL type (read from the registries, so a new
entry is covered on registration), every rollout-correction estimator, every loss aggregation
mode, the value loss, the SFT loss, the masked statistics and their metrics are run twice: on
clean inputs (finite values in padded slots) and on the same inputs with every masked slot of
every `(B, R)` input tensor overwritten by the poison. Outputs, metrics and gradients must be
identical (bit for bit: selection never touches the valid values).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from verl.algorithms import (
    ADV_ESTIMATORS,
    KL_PENALTY_TYPES,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    compute_advantage,
    compute_value_loss,
    kl_penalty,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from verl.algorithms.rollout_correction import (
    IS_LEVELS,
    RS_MODES,
    RolloutCorrectionParams,
    apply_rollout_correction,
    rollout_is_weights,
    rollout_mismatch_metrics,
    rollout_rejection_mask,
)
from verl.algorithms.sft import sft_loss

POISONS = [math.nan, math.inf, -math.inf]
POISON_IDS = ["nan", "+inf", "-inf"]
B, R = 6, 5
# ragged rows, one empty row; groups of two (index) so group estimators see spread
LENGTHS = [5, 3, 1, 4, 0, 2]
INDEX = ["a", "a", "b", "b", "c", "c"]


def _mask() -> torch.Tensor:
    return (torch.arange(R).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()


MASK = _mask()


def _rand(seed: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return shift + scale * torch.randn(B, R, generator=gen)


def _poison(x: torch.Tensor, value: float) -> torch.Tensor:
    """``x`` with every masked slot set to ``value`` (valid slots untouched)."""
    return torch.where(MASK != 0, x, torch.full_like(x, value))


def _pair(x: torch.Tensor, value: float) -> tuple[torch.Tensor, torch.Tensor]:
    return x.clone(), _poison(x, value)


def _same(clean: Any, dirty: Any, what: str) -> None:
    """Identical structure and values (tensors bit for bit, floats exactly)."""
    if isinstance(clean, dict):
        assert clean.keys() == dirty.keys(), what
        for key in clean:
            _same(clean[key], dirty[key], f"{what}[{key}]")
    elif isinstance(clean, (tuple, list)):
        assert len(clean) == len(dirty), what
        for i, (c, d) in enumerate(zip(clean, dirty)):
            _same(c, d, f"{what}[{i}]")
    elif isinstance(clean, torch.Tensor):
        assert torch.isfinite(clean).all() or not clean.is_floating_point(), f"{what}: clean run not finite"
        torch.testing.assert_close(dirty, clean, rtol=0, atol=0, equal_nan=False, msg=lambda m: f"{what}: {m}")
    elif isinstance(clean, float):
        assert math.isfinite(clean), f"{what}: clean run not finite"
        assert dirty == clean, f"{what}: {dirty} != {clean}"
    else:
        assert dirty == clean, what


# ---- advantage estimators ----------------------------------------------------------------


def _outcome_rewards() -> torch.Tensor:
    scores = torch.tensor([1.0, 0.0, 0.5, 2.0, 0.0, -1.0])
    last = (torch.tensor(LENGTHS) - 1).clamp(min=0)
    rewards = torch.zeros(B, R)
    rewards[torch.arange(B), last] = scores
    return rewards + 0.1 * _rand(1)  # token-level noise too: gae / reinforce++ read every token


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("name", ADV_ESTIMATORS.names())
def test_advantage_estimators_ignore_masked_slots(name: str, poison: float) -> None:
    rewards, rewards_p = _pair(_outcome_rewards(), poison)
    values, values_p = _pair(_rand(2), poison)
    common = dict(index=INDEX, gamma=0.9, lam=0.8, reward_baselines=torch.tensor([0.2, 0.1, 0.3, 0.0, 0.5, -0.2]))
    clean = compute_advantage(name, token_level_rewards=rewards, response_mask=MASK, values=values, **common)
    dirty = compute_advantage(name, token_level_rewards=rewards_p, response_mask=MASK, values=values_p, **common)
    _same(clean, dirty, f"advantage estimator {name}")
    assert (clean[0][MASK == 0] == 0).all()


# ---- policy losses ------------------------------------------------------------------------


def _policy_run(name: str, old: torch.Tensor, log_prob: torch.Tensor, adv: torch.Tensor, mode: str) -> Any:
    leaf = log_prob.clone().requires_grad_()
    extra: dict[str, Any] = {"generator": torch.Generator().manual_seed(0), "clip_cov_ratio": 0.2, "kl_cov_ratio": 0.2,
                             "loss_agg_mode": mode}
    pg_losses, metrics = POLICY_LOSSES[name](old, leaf, adv, MASK, clip_ratio_low=0.2, clip_ratio_high=0.28,
                                             clip_ratio_c=3.0, **extra)
    loss = agg_loss(pg_losses, MASK, mode, loss_scale_factor=float(R))
    loss.backward()
    return pg_losses.detach(), {k: v.detach() for k, v in metrics.items()}, loss.detach(), leaf.grad


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_policy_losses_ignore_masked_slots(name: str, mode: str, poison: float) -> None:
    old = _rand(3, 0.5, -1.5)
    log_prob = old + 0.3 * _rand(4)
    adv = _rand(5)
    clean = _policy_run(name, old, log_prob, adv, mode)
    dirty = _policy_run(name, _poison(old, poison), _poison(log_prob, poison), _poison(adv, poison), mode)
    _same(clean, dirty, f"policy loss {name} / {mode}")
    assert (clean[3][MASK == 0] == 0).all(), "gradient on a masked slot"


# ---- KL types and the in-reward KL penalty --------------------------------------------------


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("kind", KL_PENALTY_TYPES)
def test_kl_types_ignore_masked_slots(kind: str, poison: float) -> None:
    logp, ref = _rand(6, 0.5, -1.0), _rand(7, 0.5, -1.0)
    scores = _outcome_rewards()

    def run(lp: torch.Tensor, rf: torch.Tensor, sc: torch.Tensor) -> Any:
        out = []
        for mode in LOSS_AGG_MODES:
            leaf = lp.clone().requires_grad_()
            loss = agg_loss(kl_penalty(leaf, rf, kind, MASK), MASK, mode, loss_scale_factor=float(R))
            loss.backward()
            out.append((loss.detach(), leaf.grad))
        rewards, metrics = apply_kl_penalty(sc, lp, rf, MASK, FixedKLController(0.1), kind)
        return out, rewards, metrics

    clean = run(logp, ref, scores)
    dirty = run(_poison(logp, poison), _poison(ref, poison), _poison(scores, poison))
    _same(clean, dirty, f"kl {kind}")


# ---- rollout correction -------------------------------------------------------------------


def _logps() -> tuple[torch.Tensor, torch.Tensor]:
    train = _rand(8, 0.5, -1.0)
    return train, train + 0.4 * _rand(9)


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("level", IS_LEVELS)
def test_rollout_is_weights_ignore_masked_slots(level: str, normalize: bool, poison: float) -> None:
    train, rollout = _logps()
    clean = rollout_is_weights(train, rollout, MASK, level, 1.5, normalize)
    dirty = rollout_is_weights(_poison(train, poison), _poison(rollout, poison), MASK, level, 1.5, normalize)
    _same(clean, dirty, f"rollout_is {level}")
    assert (clean[0][MASK == 0] == 0).all()


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("mode", RS_MODES)
def test_rollout_rejection_ignores_masked_slots(mode: str, poison: float) -> None:
    train, rollout = _logps()
    clean = rollout_rejection_mask(train, rollout, MASK, mode, 0.7, 1.4)
    dirty = rollout_rejection_mask(_poison(train, poison), _poison(rollout, poison), MASK, mode, 0.7, 1.4)
    _same(clean, dirty, f"rollout_rs {mode}")
    assert 0 < clean[1]["rollout_rs_masked_fraction"] < 1  # the fixture rejects some, not all


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("rs", [None, *RS_MODES])
@pytest.mark.parametrize("level", [None, *IS_LEVELS])
def test_apply_rollout_correction_and_mismatch_metrics_ignore_masked_slots(level, rs, poison: float) -> None:
    train, rollout = _logps()
    params = RolloutCorrectionParams(rollout_is=level, is_threshold=1.5, rollout_rs=rs, rs_low=0.5, rs_high=2.0)
    clean = apply_rollout_correction(train, rollout, MASK, params), rollout_mismatch_metrics(train, rollout, MASK)
    train_p, rollout_p = _poison(train, poison), _poison(rollout, poison)
    dirty = apply_rollout_correction(train_p, rollout_p, MASK, params), rollout_mismatch_metrics(train_p, rollout_p, MASK)
    if clean[0][0] is None:
        assert dirty[0][0] is None
        clean, dirty = (clean[0][1:], clean[1]), (dirty[0][1:], dirty[1])
    _same(clean, dirty, f"rollout correction is={level} rs={rs}")


# ---- aggregation, value loss, SFT loss, masked statistics ----------------------------------


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_and_value_loss_ignore_masked_slots(mode: str, poison: float) -> None:
    loss_mat, vpreds, returns, values_old = _rand(10), _rand(11), _rand(12), _rand(13)

    def run(lm: torch.Tensor, vp: torch.Tensor, ret: torch.Tensor, vo: torch.Tensor) -> Any:
        lm, vp = lm.clone().requires_grad_(), vp.clone().requires_grad_()
        agg = agg_loss(lm, MASK, mode, global_token_count=20.0, global_seq_count=6.0, loss_scale_factor=float(R))
        vf, vf_metrics = compute_value_loss(vp, ret, vo, MASK, 0.2, mode, loss_scale_factor=float(R))
        (agg + vf).backward()
        return agg.detach(), vf.detach(), vf_metrics, lm.grad, vp.grad

    clean = run(loss_mat, vpreds, returns, values_old)
    dirty = run(*(_poison(x, poison) for x in (loss_mat, vpreds, returns, values_old)))
    _same(clean, dirty, f"agg_loss / value loss {mode}")


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
def test_sft_loss_and_masked_statistics_ignore_masked_slots(poison: float) -> None:
    x = _rand(14, 0.5, -1.0)

    def run(v: torch.Tensor) -> Any:
        leaf = v.clone().requires_grad_()
        loss, metrics = sft_loss(leaf, MASK, 20.0)
        loss.backward()
        stats = (masked_sum(v, MASK), masked_mean(v, MASK, axis=-1), masked_var(v, MASK), masked_whiten(v, MASK))
        return loss.detach(), metrics, leaf.grad, stats

    _same(run(x), run(_poison(x, poison)), "sft loss / masked statistics")


# ---- step metrics over the same tensors ---------------------------------------------------


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
def test_step_metrics_ignore_masked_slots(poison: float) -> None:
    from verl.protocol import DataProto
    from verl.trainer.metrics import compute_data_metrics, compute_rollout_entropy_metrics

    prompt_mask = torch.ones(B, 2)
    tensors = {"token_level_scores": _outcome_rewards(), "token_level_rewards": _outcome_rewards() - 0.05,
               "advantages": _rand(15), "returns": _rand(16), "values": _rand(17)}
    entropy = _rand(18).abs()

    def run(poisoned: bool) -> Any:
        fix = (lambda x: _poison(x, poison)) if poisoned else (lambda x: x.clone())
        batch = DataProto.from_dict(tensors={
            "prompts": torch.zeros(B, 2, dtype=torch.long), "responses": torch.zeros(B, R, dtype=torch.long),
            "attention_mask": torch.cat([prompt_mask, MASK], -1), "response_mask": MASK,
            **{k: fix(v) for k, v in tensors.items()},
        })
        return compute_data_metrics(batch, use_critic=True), compute_rollout_entropy_metrics(fix(entropy), MASK)

    _same(run(False), run(True), "step metrics")


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
def test_update_forward_token_statistics_ignore_masked_slots(poison: float) -> None:
    from verl.algorithms.token_selection import high_entropy_token_mask, mismatch_metrics_from_sums, rollout_mismatch_sums

    train, rollout = _logps()
    entropy = _rand(19).abs()

    def run(tr: torch.Tensor, ro: torch.Tensor, ent: torch.Tensor) -> Any:
        sums, diff_max = rollout_mismatch_sums(tr, ro, MASK)
        return sums, mismatch_metrics_from_sums(sums, diff_max), high_entropy_token_mask(ent, MASK, 0.5)

    dirty = run(_poison(train, poison), _poison(rollout, poison), _poison(entropy, poison))
    _same(run(train, rollout, entropy), dirty, "update-forward token statistics")


# ---- extension points written to verl's signatures (they multiply by the mask) -------------


def _verl_style_estimator(token_level_rewards, response_mask, index=None, config=None):
    scores = token_level_rewards.sum(-1)  # verl sums each row unmasked
    adv = (scores - scores.mean()).unsqueeze(-1) * response_mask
    return adv, adv


def _verl_style_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                     rollout_is_weights=None):
    pg = -advantages * torch.exp(log_prob - old_log_prob) * rollout_is_weights
    return (pg * response_mask).sum() / response_mask.sum(), {"actor/pg_clipfrac": 0.0}


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
def test_verl_signature_extensions_get_selected_inputs(poison: float) -> None:
    from verl.algorithms.verl_signatures import adapt_adv_estimator, adapt_policy_loss

    estimator, loss_fn = adapt_adv_estimator(_verl_style_estimator), adapt_policy_loss(_verl_style_loss)
    old, log_prob, adv, weights = _rand(20, 0.5, -1.0), _rand(21, 0.5, -1.0), _rand(22), _rand(23).abs()

    def run(fix: Any) -> Any:
        leaf = fix(log_prob).requires_grad_()
        pg, metrics = loss_fn(fix(old), leaf, fix(adv), MASK, rollout_is_weights=fix(weights))
        agg_loss(pg, MASK, "token-mean").backward()
        return estimator(fix(_outcome_rewards()), MASK, index=INDEX), pg.detach(), metrics, leaf.grad

    _same(run(lambda x: x.clone()), run(lambda x: _poison(x, poison)), "verl-signature extensions")
