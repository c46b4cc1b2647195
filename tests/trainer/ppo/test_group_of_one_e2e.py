"""GRPO / RLOO with verl's default ``rollout.n=1`` train (a group of one: baseline 0, as verl)."""

from __future__ import annotations

import math

import pytest
from run_helpers import tiny_run_overrides

from verl.config import load_config
from verl.trainer.ppo.trainer import RLTrainer


@pytest.mark.e2e
@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_one_step_with_one_sample_per_prompt(estimator, tiny_model_dir, tmp_path):
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                "algorithm.adv_estimator": estimator,
                "actor_rollout_ref.rollout.n": 1,
                "trainer.total_training_steps": 1,
            },
        ),
    )
    (row,) = RLTrainer(config=cfg).fit()
    # the dense digit reward is > 0 for most responses: with baseline 0 the advantages are the scores
    assert row["critic/advantages/max"] > 0 and math.isfinite(row["actor/pg_loss"]) and row["actor/grad_norm"] > 0
    assert row["critic/advantages/max"] == pytest.approx(
        row["critic/score/max"] / (1 + 1e-6 if estimator == "grpo" else 1), rel=1e-4
    )
