"""Masked slots never matter: NaN / +inf / -inf wherever ``response_mask == 0`` changes nothing.

One parametrised test over a table of cases built from the registries (every advantage
estimator, policy loss and KL type, so a new entry is covered on registration), every
rollout-correction estimator (IS levels with and without batch normalisation, RS modes, their
combinations and the mismatch metrics), every loss aggregation mode, the value and SFT losses,
the masked statistics, the step metrics, the update forward's token statistics and the
extension points written to verl's signatures. Each case runs twice: on clean inputs (finite
values in padded slots) and with every masked slot of every `(B, R)` input overwritten by the
poison. Outputs, metrics and gradients must be identical, bit for bit (selection never touches
the valid values), and the clean run finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
from verl.algorithms.token_selection import high_entropy_token_mask, mismatch_metrics_from_sums, rollout_mismatch_sums
from verl.algorithms.verl_signatures import adapt_adv_estimator, adapt_policy_loss
from verl.protocol import DataProto
from verl.trainer.ppo.metrics import compute_data_metrics, compute_rollout_entropy_metrics

POISONS = [math.nan, math.inf, -math.inf]
POISON_IDS = ["nan", "+inf", "-inf"]
B, R = 6, 5
# ragged rows, one empty row; groups of two (index) so group estimators see spread
LENGTHS = [5, 3, 1, 4, 0, 2]
INDEX = ["a", "a", "b", "b", "c", "c"]
MASK = (torch.arange(R).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()

Fix = Callable[[torch.Tensor], torch.Tensor]  # applied to every (B, R) input: a clone, or the poisoning


def _rand(seed: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return shift + scale * torch.randn(B, R, generator=gen)


def _poisoner(value: float) -> Fix:
    return lambda x: torch.where(MASK != 0, x, torch.full_like(x, value))


def _clean(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def _outcome_rewards() -> torch.Tensor:
    scores = torch.tensor([1.0, 0.0, 0.5, 2.0, 0.0, -1.0])
    rewards = torch.zeros(B, R)
    rewards[torch.arange(B), (torch.tensor(LENGTHS) - 1).clamp(min=0)] = scores
    return rewards + 0.1 * _rand(1)  # token-level noise too: gae / reinforce++ read every token


def _logps() -> tuple[torch.Tensor, torch.Tensor]:
    train = _rand(8, 0.5, -1.0)
    return train, train + 0.4 * _rand(9)


# ---- one runner per family: fix -> everything the call returns (outputs, metrics, gradients) ----


def _advantage(name: str) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        out = compute_advantage(
            name,
            token_level_rewards=fix(_outcome_rewards()),
            response_mask=MASK,
            values=fix(_rand(2)),
            index=INDEX,
            gamma=0.9,
            lam=0.8,
            reward_baselines=torch.tensor([0.2, 0.1, 0.3, 0.0, 0.5, -0.2]),
            inputs={
                "old_log_probs": fix(_rand(24, 0.5, -1.0)),  # optimal token baselines
                "sum_pi_squared": fix(_rand(25).abs() * 0.3),
                "rollout_is_weights": fix(_rand(26).abs()),
            },
        )
        assert (out[0][MASK == 0] == 0).all()
        return out

    return run


def _policy_loss(name: str, mode: str) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        old = _rand(3, 0.5, -1.5)
        leaf = fix(old + 0.3 * _rand(4)).requires_grad_()
        pg_losses, metrics = POLICY_LOSSES[name](
            fix(old),
            leaf,
            fix(_rand(5)),
            MASK,
            clip_ratio_low=0.2,
            clip_ratio_high=0.28,
            clip_ratio_c=3.0,
            generator=torch.Generator().manual_seed(0),
            clip_cov_ratio=0.2,
            kl_cov_ratio=0.2,
            dro_beta=0.1,
            loss_agg_mode=mode,
        )
        loss = agg_loss(pg_losses, MASK, mode, loss_scale_factor=float(R))
        loss.backward()
        assert (leaf.grad[MASK == 0] == 0).all(), "gradient on a masked slot"
        return pg_losses.detach(), {k: v.detach() for k, v in metrics.items()}, loss.detach(), leaf.grad

    return run


def _kl(kind: str) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        logp, ref = fix(_rand(6, 0.5, -1.0)), fix(_rand(7, 0.5, -1.0))
        out = []
        for mode in LOSS_AGG_MODES:
            leaf = logp.clone().requires_grad_()
            loss = agg_loss(kl_penalty(leaf, ref, kind, MASK), MASK, mode, loss_scale_factor=float(R))
            loss.backward()
            out.append((loss.detach(), leaf.grad))
        return out, apply_kl_penalty(fix(_outcome_rewards()), logp, ref, MASK, FixedKLController(0.1), kind)

    return run


def _rollout_is(level: str, normalize: bool) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        train, rollout = _logps()
        weights, metrics = rollout_is_weights(fix(train), fix(rollout), MASK, level, 1.5, normalize)
        assert (weights[MASK == 0] == 0).all()
        return weights, metrics

    return run


def _rollout_rs(mode: str) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        train, rollout = _logps()
        new_mask, metrics = rollout_rejection_mask(fix(train), fix(rollout), MASK, mode, 0.7, 1.4)
        assert 0 < metrics["rollout_rs_masked_fraction"] < 1  # the fixture rejects some, not all
        return new_mask, metrics

    return run


def _rollout_correction(level: str | None, rs: str | None) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        train, rollout = (fix(x) for x in _logps())
        params = RolloutCorrectionParams(rollout_is=level, is_threshold=1.5, rollout_rs=rs, rs_low=0.5, rs_high=2.0)
        weights, mask, metrics = apply_rollout_correction(train, rollout, MASK, params)
        return ("off" if weights is None else weights), mask, metrics, rollout_mismatch_metrics(train, rollout, MASK)

    return run


def _agg_and_value(mode: str) -> Callable[[Fix], Any]:
    def run(fix: Fix) -> Any:
        lm, vp = fix(_rand(10)).requires_grad_(), fix(_rand(11)).requires_grad_()
        agg = agg_loss(lm, MASK, mode, global_token_count=20.0, global_seq_count=6.0, loss_scale_factor=float(R))
        vf, vf_metrics = compute_value_loss(
            vp, fix(_rand(12)), fix(_rand(13)), MASK, 0.2, mode, loss_scale_factor=float(R)
        )
        (agg + vf).backward()
        return agg.detach(), vf.detach(), vf_metrics, lm.grad, vp.grad

    return run


def _sft_and_statistics(fix: Fix) -> Any:
    x = fix(_rand(14, 0.5, -1.0))
    leaf = x.clone().requires_grad_()
    loss, metrics = sft_loss(leaf, MASK, 20.0)
    loss.backward()
    return (
        loss.detach(),
        metrics,
        leaf.grad,
        (masked_sum(x, MASK), masked_mean(x, MASK, axis=-1), masked_var(x, MASK), masked_whiten(x, MASK)),
    )


def _step_metrics(fix: Fix) -> Any:
    batch = DataProto.from_dict(
        tensors={
            "prompts": torch.zeros(B, 2, dtype=torch.long),
            "responses": torch.zeros(B, R, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(B, 2), MASK], -1),
            "response_mask": MASK,
            "token_level_scores": fix(_outcome_rewards()),
            "token_level_rewards": fix(_outcome_rewards() - 0.05),
            "advantages": fix(_rand(15)),
            "returns": fix(_rand(16)),
            "values": fix(_rand(17)),
        }
    )
    return compute_data_metrics(batch, use_critic=True), compute_rollout_entropy_metrics(fix(_rand(18).abs()), MASK)


def _update_forward_statistics(fix: Fix) -> Any:
    train, rollout = (fix(x) for x in _logps())
    sums, diff_max = rollout_mismatch_sums(train, rollout, MASK)
    return sums, mismatch_metrics_from_sums(sums, diff_max), high_entropy_token_mask(fix(_rand(19).abs()), MASK, 0.5)


def _verl_style_estimator(token_level_rewards, response_mask, index=None, config=None):
    scores = token_level_rewards.sum(-1)  # verl sums each row unmasked
    adv = (scores - scores.mean()).unsqueeze(-1) * response_mask
    return adv, adv


def _verl_style_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    pg = -advantages * torch.exp(log_prob - old_log_prob) * rollout_is_weights
    return (pg * response_mask).sum() / response_mask.sum(), {"actor/pg_clipfrac": 0.0}


def _verl_signature_extensions(fix: Fix) -> Any:
    estimator, loss_fn = adapt_adv_estimator(_verl_style_estimator), adapt_policy_loss(_verl_style_loss)
    leaf = fix(_rand(21, 0.5, -1.0)).requires_grad_()
    pg, metrics = loss_fn(
        fix(_rand(20, 0.5, -1.0)), leaf, fix(_rand(22)), MASK, rollout_is_weights=fix(_rand(23).abs())
    )
    agg_loss(pg, MASK, "token-mean").backward()
    return estimator(fix(_outcome_rewards()), MASK, index=INDEX), pg.detach(), metrics, leaf.grad


CASES: dict[str, Callable[[Fix], Any]] = {
    **{f"advantage/{name}": _advantage(name) for name in ADV_ESTIMATORS.names()},
    **{
        f"policy_loss/{name}/{mode}": _policy_loss(name, mode)
        for name in POLICY_LOSSES.names()
        for mode in LOSS_AGG_MODES
    },
    **{f"kl/{kind}": _kl(kind) for kind in KL_PENALTY_TYPES},
    **{f"rollout_is/{level}/norm={norm}": _rollout_is(level, norm) for level in IS_LEVELS for norm in (False, True)},
    **{f"rollout_rs/{mode}": _rollout_rs(mode) for mode in RS_MODES},
    **{
        f"rollout_correction/{level}/{rs}": _rollout_correction(level, rs)
        for level in (None, *IS_LEVELS)
        for rs in (None, *RS_MODES)
    },
    **{f"agg_loss+value_loss/{mode}": _agg_and_value(mode) for mode in LOSS_AGG_MODES},
    "sft_loss+masked_statistics": _sft_and_statistics,
    "step_metrics": _step_metrics,
    "update_forward_statistics": _update_forward_statistics,
    "verl_signature_extensions": _verl_signature_extensions,
}


def _same(clean: Any, dirty: Any, what: str) -> None:
    """Identical structure and values (tensors bit for bit, floats exactly); the clean run finite."""
    if isinstance(clean, dict):
        assert clean.keys() == dirty.keys(), what
        for key in clean:
            _same(clean[key], dirty[key], f"{what}[{key}]")
    elif isinstance(clean, (tuple, list)):
        assert len(clean) == len(dirty), what
        for i, (c, d) in enumerate(zip(clean, dirty)):
            _same(c, d, f"{what}[{i}]")
    elif isinstance(clean, torch.Tensor):
        assert not clean.is_floating_point() or torch.isfinite(clean).all(), f"{what}: clean run not finite"
        torch.testing.assert_close(dirty, clean, rtol=0, atol=0, equal_nan=False, msg=lambda m: f"{what}: {m}")
    elif isinstance(clean, float):
        assert math.isfinite(clean), f"{what}: clean run not finite"
        assert dirty == clean, f"{what}: {dirty} != {clean}"
    else:
        assert dirty == clean, what


def test_the_case_table_covers_every_registered_entry():
    names = set(CASES)
    assert {f"advantage/{n}" for n in ADV_ESTIMATORS.names()} <= names
    assert {f"policy_loss/{n}/{m}" for n in POLICY_LOSSES.names() for m in LOSS_AGG_MODES} <= names
    assert {f"kl/{k}" for k in KL_PENALTY_TYPES} <= names


@pytest.mark.parametrize("poison", POISONS, ids=POISON_IDS)
@pytest.mark.parametrize("case", list(CASES))
def test_masked_slots_change_no_loss_advantage_weight_metric_or_gradient(case: str, poison: float) -> None:
    run = CASES[case]
    _same(run(_clean), run(_poisoner(poison)), case)
