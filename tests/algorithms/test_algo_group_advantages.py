"""Group-based estimators: grouping by uid, ragged groups, B01, B03, B04, and each formula."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from verl.algorithms import compute_advantage
from verl.algorithms.aggregation import agg_loss
from verl.algorithms.policy_loss import POLICY_LOSSES


def outcome(scores: list[float], lengths: list[int] | None = None, width: int = 4):
    """Outcome rewards on the last valid token of each row; garbage 9.0 on padded slots."""
    lengths = lengths or [width] * len(scores)
    rewards = torch.full((len(scores), width), 9.0)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, :n] = 0.0
        rewards[i, n - 1] = s
        mask[i, :n] = 1
    return rewards, mask


def seq_adv(name: str, scores, index, lengths=None, **kw) -> torch.Tensor:
    rewards, mask = outcome(scores, lengths)
    adv, ret = compute_advantage(name, token_level_rewards=rewards, response_mask=mask, index=np.asarray(index), **kw)
    torch.testing.assert_close(adv, ret)
    assert adv[mask == 0].abs().sum() == 0
    # constant over each row's valid tokens
    for i in range(len(scores)):
        assert torch.all(adv[i][mask[i] == 1] == adv[i][mask[i] == 1][0])
    return adv[:, 0]


# ---------------------------------------------------------------- GRPO


def test_grpo_groups_by_uid_not_position_ragged() -> None:
    # group a = [0, 1, 0], group b = [1, 2], interleaved positions
    index = ["b", "a", "a", "b", "a"]
    scores = [1.0, 0.0, 1.0, 2.0, 0.0]
    adv = seq_adv("grpo", scores, index, lengths=[4, 2, 3, 1, 4])
    std_a = math.sqrt(1.0 / 3.0)  # Bessel std of [0, 1, 0]
    std_b = math.sqrt(0.5)
    expected = [
        -0.5 / (std_b + 1e-6),
        -1 / 3 / (std_a + 1e-6),
        2 / 3 / (std_a + 1e-6),
        0.5 / (std_b + 1e-6),
        -1 / 3 / (std_a + 1e-6),
    ]
    torch.testing.assert_close(adv, torch.tensor(expected))
    assert adv[2].item() == pytest.approx(1.154699, abs=1e-5)


def test_dr_grpo_no_std_normalisation() -> None:
    adv = seq_adv("grpo", [1.0, 0.0, 1.0, 2.0, 0.0], ["b", "a", "a", "b", "a"], norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, torch.tensor([-0.5, -1 / 3, 2 / 3, 0.5, -1 / 3]))


def test_grpo_singleton_group_has_baseline_zero() -> None:
    # verl's rule for a group of one: mean 0, std 1
    adv = seq_adv("grpo", [0.7, 1.0, 0.0], ["solo", "g", "g"])
    assert adv[0].item() == pytest.approx(0.7 / (1 + 1e-6), abs=1e-7)
    assert seq_adv("grpo", [0.7], ["solo"], norm_adv_by_std_in_grpo=False).item() == pytest.approx(0.7)


def test_b01_degenerate_groups_give_exact_zero() -> None:
    """B01: g1 all 1, g2 all 0, g3 eight copies of 0.35 (float32), g4 [NaN, NaN, NaN, 1.0]."""
    nan = float("nan")
    scores = [1.0] * 4 + [0.0] * 4 + [0.35] * 8 + [nan, nan, nan, 1.0]
    index = ["g1"] * 4 + ["g2"] * 4 + ["g3"] * 8 + ["g4"] * 4
    # the input does trigger the fault: a sequential float32 mean of g3 is 0.34999996, not 0.35
    running = np.float32(0.0)
    for _ in range(8):
        running = np.float32(running + np.float32(0.35))
    assert np.float32(running / np.float32(8)) != np.float32(0.35)
    for norm in (True, False):
        adv = seq_adv("grpo", scores, index, norm_adv_by_std_in_grpo=norm)
        assert torch.isfinite(adv).all()
        assert adv.abs().max().item() <= 1e-6
        assert torch.all(adv == 0)
    # a policy loss built on these advantages is finite with a finite gradient
    rewards, mask = outcome(scores)
    adv_tok, _ = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=np.asarray(index))
    logp = torch.zeros(20, 4, requires_grad=True)
    pg, _ = POLICY_LOSSES.get("vanilla")(logp.detach(), logp, adv_tok, mask)
    loss = agg_loss(pg, mask, "token-mean")
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()


def test_b03_close_but_distinct_rewards_not_shrunk() -> None:
    """B03: uids [a, a, b, b], float32 scores [1.0, 1.00001, 2.0, 2.00001] -> ±0.6196 (bug: ±0.0050)."""
    adv = seq_adv("grpo", [1.0, 1.00001, 2.0, 2.00001], ["a", "a", "b", "b"])
    torch.testing.assert_close(adv, torch.tensor([-0.6196, 0.6196, -0.6196, 0.6196]), atol=1e-3, rtol=0)


def _grpo_loop_reference(scores: list[float], index: list, eps: float = 1e-6) -> list[float]:
    """Straightforward per-group loop in float64 (the reference the vectorised path must match)."""
    groups: dict = defaultdict(list)
    for s, k in zip(scores, index):
        groups[k].append(s)
    out = []
    for s, k in zip(scores, index):
        g = np.asarray(groups[k], dtype=np.float64)
        if len(g) == 1:  # verl's group of one: mean 0, std 1
            out.append(s / (1 + eps))
        else:
            out.append(0.0 if g.max() == g.min() else (s - g.mean()) / (g.std(ddof=1) + eps))
    return out


def test_grpo_matches_loop_reference_on_random_ragged_batches() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        sizes = rng.integers(1, 6, size=rng.integers(1, 6))
        index = [f"u{g}" for g, n in enumerate(sizes) for _ in range(n)]
        perm = rng.permutation(len(index))
        index = [index[i] for i in perm]
        scores = rng.choice([0.0, 0.5, 1.0, 0.35], size=len(index)).astype(np.float32).tolist()
        adv = seq_adv("grpo", scores, index)
        torch.testing.assert_close(
            adv.double(), torch.tensor(_grpo_loop_reference(scores, index)), rtol=1e-5, atol=1e-6
        )


# ---------------------------------------------------------------- RLOO


def _rloo_loop_reference(scores: list[float], index: list) -> list[float]:
    groups: dict = defaultdict(list)
    for s, k in zip(scores, index):
        groups[k].append(s)
    out = []
    for s, k in zip(scores, index):
        g = groups[k]
        out.append(s if len(g) == 1 else s - (sum(g) - s) / (len(g) - 1))  # documented singleton rule
    return out


def test_b04_a_group_of_four() -> None:
    adv = seq_adv("rloo", [1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))


def test_b04_b_singleton_rule_raw_score() -> None:
    """B04 b: rollout.n = 1 (verl's default); the leave-one-out baseline is undefined, the rule is baseline 0."""
    adv = seq_adv("rloo", [0.7], ["only"])
    assert adv.item() == pytest.approx(0.7)


def test_b04_c_ragged_groups_loop_and_vectorised_agree() -> None:
    index = [0, 0, 0, 1, 2, 2]
    scores = [1.0, 0.0, 0.0, 0.5, 1.0, 0.0]
    adv = seq_adv("rloo", scores, index)
    torch.testing.assert_close(adv, torch.tensor([1.0, -0.5, -0.5, 0.5, 1.0, -1.0]))
    torch.testing.assert_close(
        adv.double(), torch.tensor(_rloo_loop_reference(scores, index), dtype=torch.float64), atol=1e-6, rtol=0
    )


def test_rloo_matches_loop_reference_random_shuffled() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        sizes = rng.integers(1, 5, size=rng.integers(1, 6))
        index = [g for g, n in enumerate(sizes) for _ in range(n)]
        index = [index[i] for i in rng.permutation(len(index))]
        scores = rng.random(len(index)).astype(np.float32).tolist()
        adv = seq_adv("rloo", scores, index)
        torch.testing.assert_close(
            adv.double(), torch.tensor(_rloo_loop_reference(scores, index), dtype=torch.float64), atol=1e-6, rtol=0
        )


def test_nan_scores_are_unscorable_in_every_group_estimator() -> None:
    nan = float("nan")
    for name in ("grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"):
        adv = seq_adv(name, [nan, 1.0, 0.0, nan], ["a", "a", "a", "b"])
        assert torch.isfinite(adv).all(), name
        assert adv[0].item() == 0.0 and adv[3].item() == 0.0, name


# ---------------------------------------------------------------- OPO, GPG, pass@k, RF++-baseline


def test_opo_length_weighted_baseline() -> None:
    # group x: scores [1, 0] with lengths [1, 3]: b = (1*1 + 3*0) / 4 = 0.25
    # group y: scores [2, 0, 1] lengths [2, 2, 4]: b = (4 + 0 + 4) / 8 = 1.0
    adv = seq_adv("opo", [1.0, 2.0, 0.0, 0.0, 1.0], ["x", "y", "x", "y", "y"], lengths=[1, 2, 3, 2, 4])
    torch.testing.assert_close(adv, torch.tensor([0.75, 1.0, -0.25, -1.0, 0.0]))


def test_gpg_alpha_correction() -> None:
    # groups a [1, 0] (informative), b [1, 1] (constant: M = 2 invalid), c [0, 1]; alpha = 6/4
    scores, index = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0], ["a", "b", "a", "c", "c", "b"]
    adv = seq_adv("gpg", scores, index)
    torch.testing.assert_close(adv, torch.tensor([0.75, 0.0, -0.75, -0.75, 0.75, 0.0]))
    adv2 = seq_adv("gpg", scores, index, f_norm=0.5)
    torch.testing.assert_close(adv2, 2 * adv)
    # no invalid groups: alpha = 1, plain group-mean baseline
    torch.testing.assert_close(seq_adv("gpg", [1.0, 0.0], ["a", "a"]), torch.tensor([0.5, -0.5]))


def test_grpo_passk_only_best_sample() -> None:
    scores, index = [0.2, 0.9, 0.5, 1.0, 1.0, 0.0], ["g", "g", "g", "h", "h", "h"]
    adv = seq_adv("grpo_passk", scores, index)
    std = float(np.std([0.2, 0.9, 0.5], ddof=1))
    expected = [0.0, 0.4 / (std + 1e-6), 0.0, 0.0, 0.0, 0.0]  # tie in h: max - second = 0
    torch.testing.assert_close(adv, torch.tensor(expected))
    assert adv[1].item() == pytest.approx(1.13899, abs=1e-4)
    torch.testing.assert_close(
        seq_adv("grpo_passk", scores, index, norm_adv_by_std_in_grpo=False),
        torch.tensor([0.0, 0.4, 0.0, 0.0, 0.0, 0.0]),
    )
    with pytest.raises(ValueError, match="at least 2"):
        seq_adv("grpo_passk", [1.0, 0.0, 1.0], ["g", "g", "solo"])


def test_reinforce_plus_plus_baseline_group_mean_then_batch_whitening() -> None:
    # a = [1, 0] -> ±0.5 ; b = [2, 2] -> 0 ; 8 tokens [.5,.5,-.5,-.5,0,0,0,0], unbiased var 1/7
    rewards, mask = outcome([1.0, 2.0, 0.0, 2.0], width=2)
    adv, _ = compute_advantage(
        "reinforce_plus_plus_baseline",
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["a", "b", "a", "b"]),
    )
    s = 0.5 / math.sqrt(1 / 7 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[s, s], [0.0, 0.0], [-s, -s], [0.0, 0.0]]))


def test_group_estimators_need_index() -> None:
    rewards, mask = outcome([1.0, 0.0])
    for name in ("grpo", "rloo", "opo", "gpg", "grpo_passk", "reinforce_plus_plus_baseline"):
        with pytest.raises(ValueError, match="index"):
            compute_advantage(name, token_level_rewards=rewards, response_mask=mask)
        with pytest.raises(ValueError, match="3 entries"):
            compute_advantage(name, token_level_rewards=rewards, response_mask=mask, index=np.arange(3))
