"""verl's newer estimators and bypass-mode loss through the whole loop: 2 steps of the tiny model on CPU."""

from __future__ import annotations

import math

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.commands.train import main

pytestmark = pytest.mark.e2e

A, RC = "actor_rollout_ref.actor", "algorithm.rollout_correction"
CASES = {
    "optimal_token_baseline": {
        "algorithm.adv_estimator": "optimal_token_baseline",
        f"{A}.calculate_sum_pi_squared": True,
    },
    "bypass_reinforce": {
        f"{RC}.bypass_mode": True,
        f"{RC}.loss_type": "reinforce",
        f"{RC}.rollout_is": "token",
        f"{RC}.rollout_rs": "token_k1",
        f"{RC}.rollout_rs_threshold": "'0.5_2.0'",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        f"{A}.policy_loss.loss_mode": "vanilla",
    },
    "sapo": {f"{A}.policy_loss.loss_mode": "sapo"},
}


GDPO_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = sum(c.isdigit() for c in solution_str)
    acc, fmt = float(digits > 1), float(len(solution_str) % 2 == 0)
    return {"score": acc + fmt, "acc": acc, "fmt": fmt}
"""


def test_gdpo_takes_its_components_from_the_reward_functions_dict(tiny_model_dir, tmp_path) -> None:
    reward = tmp_path / "gdpo_reward.py"
    reward.write_text(GDPO_REWARD)
    overrides = tiny_run_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "algorithm.adv_estimator": "gdpo",
            "algorithm.gdpo_reward_keys": "[acc,fmt]",
            "algorithm.gdpo_reward_weights": "[1.0,0.5]",
            "reward_model.reward_manager": "gdpo",
        },
    )
    overrides = [o for o in overrides if not o.startswith("custom_reward_function.path=")]
    assert main([*overrides, f"custom_reward_function.path={reward}"]) == 0
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2] and all(math.isfinite(m["actor/pg_loss"]) for m in metrics.values())
    assert all("reward/acc" in m and "reward/fmt" in m for m in metrics.values())


@pytest.mark.parametrize("name", list(CASES))
def test_two_steps_run_with_finite_losses(name: str, tiny_model_dir, tmp_path) -> None:
    assert main(tiny_run_overrides(tiny_model_dir, tmp_path, **CASES[name])) == 0
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2]
    for step in metrics.values():
        assert math.isfinite(step["actor/pg_loss"]) and math.isfinite(step["actor/grad_norm"])
    if name == "bypass_reinforce":  # as verl: no old-log-prob forward
        assert all(not any(k.startswith("timing_s/old_log_prob") for k in step) for step in metrics.values())
    if name == "optimal_token_baseline":  # its old log-probs (and sum pi^2) are never taken from the update
        assert all("timing_s/old_log_prob" in step for step in metrics.values())
        # token baselines: advantages differ within a response
        assert any(step["critic/advantages/max"] > 0 for step in metrics.values())
