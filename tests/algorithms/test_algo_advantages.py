"""Token-level advantage estimators (gae, reinforce_plus_plus, remax) and the shared signature."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from verl.algorithms import ADV_ESTIMATORS, AdvantageConfig, compute_advantage, estimator_inputs


def _whiten(x: list[float]) -> torch.Tensor:
    a = np.asarray(x, dtype=np.float64)
    return torch.tensor((a - a.mean()) / np.sqrt(a.var(ddof=1) + 1e-8), dtype=torch.float32)


# GAE by hand, gamma 0.9, lam 0.8, rewards [0, 0, 1], values [0.5, 0.4, 0.3]:
# d2 = 1 - 0.3 = 0.7                    A2 = 0.7
# d1 = 0.9*0.3 - 0.4 = -0.13            A1 = -0.13 + 0.72*0.7   = 0.374
# d0 = 0.9*0.4 - 0.5 = -0.14            A0 = -0.14 + 0.72*0.374 = 0.12928
GAE_RAW = [0.12928, 0.374, 0.7]
GAE_RETURNS = [0.62928, 0.774, 1.0]


def test_gae_hand_values() -> None:
    adv, ret = compute_advantage(
        "gae",
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0]]),
        response_mask=torch.ones(1, 3),
        values=torch.tensor([[0.5, 0.4, 0.3]]),
        gamma=0.9,
        lam=0.8,
    )
    torch.testing.assert_close(ret, torch.tensor([GAE_RETURNS]))
    torch.testing.assert_close(adv, _whiten(GAE_RAW).unsqueeze(0))


def test_gae_padding_and_gaps_do_not_leak() -> None:
    """Trailing padding and a masked gap (e.g. a tool observation) with garbage rewards/values."""
    rewards = torch.tensor([[0.0, 7.0, 0.0, 1.0, 9.0], [0.0, 0.0, 1.0, 5.0, 5.0]])
    values = torch.tensor([[0.5, 99.0, 0.4, 0.3, -50.0], [0.5, 0.4, 0.3, 1e6, 1e6]])
    mask = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.float32)
    adv, ret = compute_advantage(
        "gae", token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8
    )
    white = _whiten(GAE_RAW * 2)
    torch.testing.assert_close(ret[0, [0, 2, 3]], torch.tensor(GAE_RETURNS))
    torch.testing.assert_close(ret[1, :3], torch.tensor(GAE_RETURNS))
    torch.testing.assert_close(adv[0, [0, 2, 3]], white[:3])
    torch.testing.assert_close(adv[1, :3], white[3:])
    assert adv[mask == 0].abs().sum() == 0 and ret[mask == 0].abs().sum() == 0


def test_gae_requires_values() -> None:
    with pytest.raises(ValueError, match="values"):
        compute_advantage("gae", token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2))


def test_reinforce_plus_plus_discounted_returns_whitened() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 3.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    adv, ret = compute_advantage("reinforce_plus_plus", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    # row 0: G = [0.25, 0.5, 1]; row 1: the reward 3.0 sits on padding and is ignored: G = [1, 2, 0]
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    white = _whiten([0.25, 0.5, 1.0, 1.0, 2.0])
    torch.testing.assert_close(adv[0], white[:3])
    torch.testing.assert_close(adv[1, :2], white[3:])
    assert adv[1, 2].item() == 0.0


def test_remax_score_minus_baseline() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 4.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    adv, ret = compute_advantage(
        "remax",
        token_level_rewards=rewards,
        response_mask=mask,
        reward_baselines=torch.tensor([0.4, 0.5]),
    )
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 0.6], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_advantage("remax", token_level_rewards=rewards, response_mask=mask)


def test_estimator_inputs_come_from_the_registry_and_the_batch() -> None:
    """The loop passes one config and the batch; only remax declares (and receives) baselines."""
    assert estimator_inputs("remax") == ("reward_baselines",)
    declared = {
        "remax": ("reward_baselines",),
        "gdpo": ("reward_components",),
        **{
            n: ("old_log_probs", "sum_pi_squared", "rollout_is_weights")
            for n in ("optimal_token_baseline", "tir_optimal_token_baseline")
        },
    }
    assert all(estimator_inputs(n) == declared.get(n, ()) for n in ADV_ESTIMATORS.names())
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 4.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    batch = {"reward_baselines": torch.tensor([0.4, 0.5]), "unrelated": torch.zeros(2)}
    adv, _ = compute_advantage(
        "remax", token_level_rewards=rewards, response_mask=mask, config=AdvantageConfig(), inputs=batch
    )
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 0.6], [0.0, 0.0, 0.0]]))
    # config fields reach the estimator: gamma 0.5 discounts the gae return of a 2-token reward
    r = torch.tensor([[0.0, 1.0]])
    _, ret = compute_advantage(
        "gae",
        token_level_rewards=r,
        response_mask=torch.ones(1, 2),
        values=torch.zeros(1, 2),
        config=AdvantageConfig(gamma=0.5, lam=1.0),
        inputs=batch,
    )
    torch.testing.assert_close(ret, torch.tensor([[0.5, 1.0]]))


def test_every_estimator_has_the_same_signature() -> None:
    names = ADV_ESTIMATORS.names()
    assert set(names) == {
        "gae",
        "grpo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "opo",
        "gpg",
        "grpo_passk",
        "grpo_vectorized",
        "rloo_vectorized",
        "gdpo",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
    sigs = {n: list(inspect.signature(ADV_ESTIMATORS.get(n)).parameters.values()) for n in names}
    reference = sigs["grpo"]
    for name, params in sigs.items():
        assert [(p.name, p.kind, p.default) for p in params] == [(p.name, p.kind, p.default) for p in reference], name


@pytest.mark.parametrize(
    "name",
    ["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "grpo_passk"],
)
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_every_estimator_zero_on_padding_same_dtype_no_grad(name: str, mask_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 4, generator=gen, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0]] * 3 + [[1, 1, 0, 0]] * 3).to(mask_dtype)
    adv, ret = compute_advantage(
        name,
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["p", "q", "p", "q", "p", "q"], dtype=object),
        values=torch.rand(6, 4, generator=gen),
        reward_baselines=torch.rand(6, generator=gen),
        some_unused_extra=1,
    )
    assert adv.shape == ret.shape == (6, 4) and adv.dtype == torch.float32
    assert torch.isfinite(adv).all() and not adv.requires_grad
    assert adv[mask == 0].abs().sum() == 0 and ret[mask == 0].abs().sum() == 0


def test_unknown_estimator_suggests_closest() -> None:
    with pytest.raises(KeyError, match="Did you mean 'grpo'"):
        compute_advantage("gpro", token_level_rewards=torch.zeros(1, 1), response_mask=torch.ones(1, 1))
