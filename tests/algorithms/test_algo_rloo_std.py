"""RLOO with std normalisation (``algorithm.norm_adv_by_std_in_rloo``), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.algorithms import AdvantageConfig, compute_advantage
from verl.config import ConfigError, load_config

# groups: a = [1, 2, 6], b = [5] (singleton), c = [2, 2] (zero spread)
SCORES = [1.0, 2.0, 6.0, 5.0, 2.0, 2.0]
INDEX = np.array(["a", "a", "a", "b", "c", "c"], dtype=object)


def _rloo(norm: bool) -> list[float]:
    rewards = torch.zeros(6, 3)
    rewards[:, -1] = torch.tensor(SCORES)
    adv, ret = compute_advantage(
        "rloo",
        config=AdvantageConfig(norm_adv_by_std_in_rloo=norm),
        token_level_rewards=rewards,
        response_mask=torch.ones(6, 3),
        index=INDEX,
    )
    assert torch.equal(adv, ret) and torch.equal(adv[:, 0], adv[:, 2])
    return adv[:, 0].tolist()


def test_rloo_std_normalisation_by_hand():
    # leave-one-out means of a: 8/2, 7/2, 3/2 -> advantages -3, -1.5, 4.5; a's unbiased std: sqrt(14 / 2)
    std = math.sqrt(7.0)
    assert _rloo(False) == pytest.approx([-3.0, -1.5, 4.5, 5.0, 0.0, 0.0])
    assert _rloo(True) == pytest.approx([-3.0 / (std + 1e-6), -1.5 / (std + 1e-6), 4.5 / (std + 1e-6), 5.0, 0.0, 0.0])


def test_the_flag_is_for_rloo_only():
    cfg = load_config(
        None,
        ["algorithm.adv_estimator=rloo", "algorithm.norm_adv_by_std_in_rloo=true", "actor_rollout_ref.rollout.n=2"],
    )
    assert cfg.algorithm.norm_adv_by_std_in_rloo is True
    with pytest.raises(ConfigError, match="norm_adv_by_std_in_rloo applies to adv_estimator=rloo only"):
        load_config(None, ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_rloo=true"])
