"""Constant groups are decided on the range with a stated tolerance, never by ``std > 0``.

``np.std([0.1] * 3)`` is 1.4e-17 and ``np.std([0.1 + 0.2, 0.3, 0.30000000000000004])`` 3.2e-17:
both groups are constant (every sample has the same reward up to float64 round-off).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.algorithms import ADV_ESTIMATORS, compute_advantage
from verl.algorithms.groups import ZERO_SPREAD_TOL, group_ids, group_stats, zero_spread

NEAR_CONSTANT = [[0.1, 0.1, 0.1], [0.1 + 0.2, 0.3, 0.30000000000000004], [0.7] * 3]


@pytest.mark.parametrize("values", NEAR_CONSTANT)
def test_round_off_groups_have_zero_spread(values):
    assert np.std(values) > 0  # the trap: a std test keeps these groups
    assert zero_spread(max(values), min(values))
    st = group_stats(torch.tensor(values, dtype=torch.float64), torch.zeros(3, dtype=torch.long))
    assert st.constant.all() and st.no_spread.all()


def test_distinct_values_keep_their_spread():
    f32 = torch.tensor([0.3, 0.0], dtype=torch.float32)
    neighbour = float(torch.nextafter(f32[:1], torch.tensor([1.0]))[0])  # 0.3 + 1 float32 ulp (3e-8)
    assert not zero_spread(neighbour, float(f32[0]))
    assert not zero_spread(1e-6, 0.0)
    assert not zero_spread(1000.0 + 1e-5, 1000.0)
    # the tolerance is relative beyond |x| = 1: 1e12 and 1e12 + 100 differ by 1e-10 of their size
    assert zero_spread(1e12 + 100.0, 1e12) and ZERO_SPREAD_TOL == 1e-9
    assert zero_spread(np.array([1.0, 2.0]), np.array([1.0, 1.0])).tolist() == [True, False]


def _outcome(scores: list[float]) -> torch.Tensor:
    rewards = torch.zeros(len(scores), 3, dtype=torch.float64)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float64)
    return rewards


@pytest.mark.parametrize("name", ADV_ESTIMATORS.names())
def test_every_estimator_treats_a_round_off_group_as_constant(name):
    """A round-off group gives what an exactly constant group gives (GRPO: exactly 0, not 5e-11)."""
    informative = [1.0, 0.0, 0.0]
    near = _outcome(informative + NEAR_CONSTANT[1])
    exact = _outcome(informative + [0.3, 0.3, 0.3])
    kwargs = dict(
        response_mask=torch.ones(6, 3),
        index=[0, 0, 0, 1, 1, 1],
        values=torch.zeros(6, 3, dtype=torch.float64),
        reward_baselines=torch.full((6,), 0.25, dtype=torch.float64),
        inputs={"old_log_probs": torch.full((6, 3), -0.5), "sum_pi_squared": torch.full((6, 3), 0.4)},
    )
    adv_near, _ = compute_advantage(name, token_level_rewards=near, **kwargs)
    adv_exact, _ = compute_advantage(name, token_level_rewards=exact, **kwargs)
    torch.testing.assert_close(adv_near, adv_exact, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "name, extra",
    [
        ("grpo", {}),
        ("rloo", {}),
        ("rloo", {"norm_adv_by_std_in_rloo": True}),
        ("opo", {}),
        ("gpg", {}),
        ("grpo_passk", {}),
        ("reinforce_plus_plus_baseline", {}),
    ],
)
def test_group_estimators_give_exactly_zero_to_a_round_off_group(name, extra):
    rewards = _outcome([1.0, 0.0] + NEAR_CONSTANT[1][:2] + NEAR_CONSTANT[0][:2])
    adv, _ = compute_advantage(
        name, token_level_rewards=rewards, response_mask=torch.ones(6, 3), index=[0, 0, 1, 1, 2, 2], **extra
    )
    assert (adv[2:] == 0).all()
    assert (adv[:2] != 0).any()
    st = group_stats(rewards.sum(-1), group_ids([0, 0, 1, 1, 2, 2], 6))
    assert st.constant.tolist() == [False, False, True, True, True, True]
