"""Non-finite and non-number rewards (issue 12.2): contained, counted, logged once, masked out.

Minimal input: 16 samples (4 prompts x 4), the scorer returns NaN for one and +inf for another.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from test_reward_managers import TOK, make_batch

from verl.algorithms import compute_advantage
from verl.reward import BatchRewardManager, NaiveRewardManager
from verl.trainer.ppo.reward_errors import mask_unscored_samples

NAN_AT, INF_AT = 1, 6
SCORES = [1.0, None, 0.0, 1.0, 0.0, 1.0, None, 1.0, 0.5, 0.5, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def _score(data_source, solution_str, ground_truth, extra_info=None):
    i = extra_info["index"]
    return {NAN_AT: math.nan, INF_AT: -math.inf}.get(i, SCORES[i])


def _batch(n: int = 16):
    return make_batch([[5, 6]] * n, [[7, 8, 2]] * n, ["1"] * n, width=4)


def test_nan_and_inf_scores_are_counted_zeroed_and_logged_once(caplog) -> None:
    manager = NaiveRewardManager(TOK, compute_score=_score, timeout_s=None)
    with caplog.at_level(logging.WARNING, logger="verl.reward.managers"):
        out = manager(_batch(), return_dict=True)
        manager(_batch(), return_dict=True)  # second batch: counted, not logged again
    rewards = out["reward_tensor"]
    assert torch.isfinite(rewards).all()
    seq = rewards.sum(-1)
    assert seq[NAN_AT] == 0.0 and seq[INF_AT] == 0.0
    assert seq[0] == 1.0 and seq[8] == 0.5 and rewards[0, 2] == 1.0  # last valid token (EOS at index 2)
    assert out["reward_metrics"] == {"reward/num_errors": 2.0, "reward/num_nonfinite": 2.0, "reward/num_timeouts": 0.0}
    assert [i for i, f in enumerate(out["reward_extra_info"]["reward_nonfinite"]) if f] == [NAN_AT, INF_AT]
    warnings = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert len(warnings) == 1
    assert (
        f"sample {NAN_AT}" in warnings[0] and "data_source='builtin/arithmetic'" in warnings[0] and "nan" in warnings[0]
    )


@pytest.mark.parametrize("value", ["0.5", None, True, [1.0], {"acc": 1.0}])
def test_non_number_results_are_errors(value) -> None:
    manager = NaiveRewardManager(TOK, compute_score=lambda **kw: value, timeout_s=None)
    out = manager(_batch(2), return_dict=True)
    assert out["reward_metrics"]["reward/num_errors"] == 2.0
    assert out["reward_metrics"]["reward/num_nonfinite"] == 0.0
    assert out["reward_tensor"].abs().sum() == 0.0


def test_numpy_and_tensor_scores_are_numbers() -> None:
    manager = NaiveRewardManager(TOK, compute_score=lambda **kw: np.float32(0.25), timeout_s=None)
    out = manager(_batch(2), return_dict=True)
    assert out["reward_metrics"]["reward/num_errors"] == 0.0 and out["reward_tensor"].sum() == 0.5
    manager = NaiveRewardManager(TOK, compute_score=lambda **kw: {"score": torch.tensor(float("nan"))}, timeout_s=None)
    assert manager(_batch(2), return_dict=True)["reward_metrics"]["reward/num_nonfinite"] == 2.0


def test_batch_manager_nonfinite_entries() -> None:
    def batched(data_sources, solution_strs, ground_truths, extra_infos):
        return [math.nan, 1.0, math.inf, 0.0]

    out = BatchRewardManager(TOK, compute_score=batched, timeout_s=None)(_batch(4), return_dict=True)
    assert out["reward_tensor"].sum(-1).tolist() == [0.0, 1.0, 0.0, 0.0]
    assert out["reward_metrics"]["reward/num_nonfinite"] == 2.0 and out["reward_metrics"]["reward/num_errors"] == 2.0


def _scored_batch():
    """16 samples, groups of 4 (uid g0..g3), scored by `_score` through the manager."""
    batch = _batch()
    out = NaiveRewardManager(TOK, compute_score=_score, timeout_s=None)(batch, return_dict=True)
    batch.non_tensor_batch["uid"] = np.array([f"g{i // 4}" for i in range(16)], dtype=object)
    batch.batch["token_level_rewards"] = out["reward_tensor"]
    return batch, out


def test_unscored_samples_leave_the_loss_and_their_group() -> None:
    batch, out = _scored_batch()
    metrics = mask_unscored_samples(batch, out["reward_extra_info"])
    assert metrics == {"reward/num_masked": 2.0}
    mask = batch.batch["response_mask"]
    assert mask[NAN_AT].sum() == 0 and mask[INF_AT].sum() == 0 and mask[0].sum() == 3
    adv, _ = compute_advantage(
        "grpo",
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=mask,
        index=batch.non_tensor_batch["uid"],
    )
    seq = adv[:, 0]
    # group 0 without the NaN sample: scores [1, 0, 1]: mean 2/3, Bessel std sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert seq[0].item() == pytest.approx((1 - 2 / 3) / (std + 1e-6), abs=1e-5)
    assert seq[2].item() == pytest.approx((0 - 2 / 3) / (std + 1e-6), abs=1e-5)
    assert seq[NAN_AT].item() == 0.0 and adv[NAN_AT].abs().sum() == 0.0
    # group 1 without the -inf sample: [0, 1, 1]
    assert seq[4].item() == pytest.approx((0 - 2 / 3) / (std + 1e-6), abs=1e-5)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gae", "reinforce_plus_plus", "opo"])
def test_estimators_stay_finite_with_one_nan_sample(estimator) -> None:
    batch, out = _scored_batch()
    mask_unscored_samples(batch, out["reward_extra_info"])
    mask = batch.batch["response_mask"]
    values = torch.linspace(-0.5, 0.5, 16 * 4).reshape(16, 4) * mask
    adv, ret = compute_advantage(
        estimator,
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=mask,
        index=batch.non_tensor_batch["uid"],
        values=values,
    )
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert adv[NAN_AT].abs().sum() == 0.0 and adv[INF_AT].abs().sum() == 0.0
    assert adv[mask.bool()].abs().sum() > 0


def test_rloo_hand_computed_without_the_unscored_sample() -> None:
    batch, out = _scored_batch()
    mask_unscored_samples(batch, out["reward_extra_info"])
    adv, _ = compute_advantage(
        "rloo",
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
    )
    # group 0 = [1, 0, 1] after removal: RLOO A_i = s_i - mean of the others
    assert adv[0, 0].item() == pytest.approx(1 - 0.5) and adv[2, 0].item() == pytest.approx(0 - 1.0)


def test_nothing_masked_when_every_sample_is_unscored() -> None:
    batch = _batch(4)
    out = NaiveRewardManager(TOK, compute_score=lambda **kw: math.nan, timeout_s=None)(batch, return_dict=True)
    batch.non_tensor_batch["uid"] = np.array(["a"] * 4, dtype=object)
    before = batch.batch["response_mask"].clone()
    assert mask_unscored_samples(batch, out["reward_extra_info"]) == {"reward/num_masked": 0.0}
    assert torch.equal(batch.batch["response_mask"], before)


NAN_REWARD = """
import math
_calls = [0]
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    i = _calls[0] % 16
    _calls[0] += 1
    if i == 5:
        return math.nan
    if i == 9:
        return math.inf
    return sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gae"])
def test_whole_loop_contains_and_counts_one_nan_and_one_inf_in_16(estimator, tiny_model_dir, tmp_path):
    from run_helpers import read_metrics, tiny_run_overrides

    from verl.config import load_config
    from verl.trainer import RLTrainer

    reward = tmp_path / "nan_reward.py"
    reward.write_text(NAN_REWARD)
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                "algorithm.adv_estimator": estimator,
                "actor_rollout_ref.rollout.n": 4,
                "trainer.total_training_steps": 2,
                "custom_reward_function.path": str(reward),
                "critic.optim.lr": 1e-3,
            },
        ),
    )
    RLTrainer(config=cfg).fit()
    rows = read_metrics(tmp_path)
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert (
            row["reward/num_nonfinite"] == 2.0 and row["reward/num_errors"] == 2.0 and row["reward/num_masked"] == 2.0
        )
        bad = {k: v for k, v in row.items() if not isinstance(v, (int, float)) or not math.isfinite(v)}
        assert not bad, bad  # the jsonl logger writes non-finite values as strings
        assert row["actor/grad_norm_nonfinite"] == 0.0 and row["actor/grad_norm"] > 0
