"""grpo_vectorized, rloo_vectorized, gdpo and the optimal token baselines: hand values and verl's formulas.

Each estimator is checked (1) against numbers worked out by hand in the comments and (2) against
an independent loop-based reimplementation of verl's formula (``verl.trainer.ppo.core_algos``)
on three random padded batches with ragged groups and singletons.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from verl.algorithms import AdvantageConfig, compute_advantage


def _outcome(scores: list[float], lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(1)).float()
    rewards = torch.zeros(len(scores), width, dtype=torch.float64)
    rewards[torch.arange(len(scores)), torch.tensor(lengths) - 1] = torch.tensor(scores, dtype=torch.float64)
    return rewards, mask


# ---------------------------------------------------------------- hand-computed values


def test_grpo_vectorized_hand_values() -> None:
    # group a = [1, 0]: mean 0.5, unbiased std 0.7071068 -> +-0.5 / (0.7071068 + 1e-6) = +-0.7071058
    # group b = [2] (one sample): verl's mean 0, std 1 -> 2 / (1 + 1e-6) = 1.999998
    rewards, mask = _outcome([1.0, 0.0, 2.0], [2, 1, 3], 3)
    adv, ret = compute_advantage(
        "grpo_vectorized", token_level_rewards=rewards, response_mask=mask, index=["a", "a", "b"]
    )
    expected = torch.tensor([[0.7071058, 0.7071058, 0], [-0.7071058, 0, 0], [1.999998] * 3], dtype=torch.float64)
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(ret, adv)
    # Dr.GRPO: no std: a -> +-0.5, b -> 2
    adv, _ = compute_advantage(
        "grpo_vectorized",
        token_level_rewards=rewards,
        response_mask=mask,
        index=["a", "a", "b"],
        norm_adv_by_std_in_grpo=False,
    )
    assert adv[:, 0].tolist() == [0.5, -0.5, 2.0]


def test_rloo_vectorized_hand_values() -> None:
    # group a = [1, 0, 2]: A_i = s_i - mean of the others: 1 - 1 = 0, 0 - 1.5 = -1.5, 2 - 0.5 = 1.5
    # group b = [3] (singleton): verl gives 0
    rewards, mask = _outcome([1.0, 0.0, 2.0, 3.0], [1, 2, 2, 1], 2)
    adv, _ = compute_advantage("rloo_vectorized", token_level_rewards=rewards, response_mask=mask, index=[0, 0, 0, 1])
    torch.testing.assert_close(adv, torch.tensor([[0, 0], [-1.5, -1.5], [1.5, 1.5], [0, 0]], dtype=torch.float64))


def test_gdpo_hand_values() -> None:
    # components c1 = [1, 0, 1, 1], c2 = [0, 0, 1, 0], groups [a, a, b, b], weights [1, 2]
    # GRPO(c1): a -> +-0.5/0.7071068 = +-0.7071058; b constant -> 0, 0
    # GRPO(c2): a constant -> 0, 0;                 b -> +-0.7071058
    # sum = [0.7071058, -0.7071058, 1.4142116, -1.4142116] (one token per row, slot 2 padded)
    # whiten: mean 0, unbiased var = (0.5 + 0.5 + 2 + 2) / 3 * (0.7071058/0.7071068)^2 -> std 1.2909926
    #   -> [0.5477226, -0.5477226, 1.0954451, -1.0954451]
    rewards, mask = _outcome([9.0, 9.0, 9.0, 9.0], [1, 1, 1, 1], 2)
    components = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    adv, _ = compute_advantage(
        "gdpo",
        token_level_rewards=rewards,
        response_mask=mask,
        index=list("aabb"),
        config=AdvantageConfig(gdpo_reward_weights=(1.0, 2.0)),
        inputs={"reward_components": components},
    )
    expected = torch.tensor([[0.5477226, 0], [-0.5477226, 0], [1.0954451, 0], [-1.0954451, 0]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="2 entries for 1 reward components"):
        compute_advantage(
            "gdpo", token_level_rewards=rewards, response_mask=mask, index=list("aabb"), gdpo_reward_weights=(1.0, 2.0)
        )


def _otb_inputs(w: list[float], width: int) -> dict[str, torch.Tensor]:
    """Per-row pi and sum(pi^2) giving w = 1 - 2 pi + sum pi^2 per token: 0.5 from (0.5, 0.5), 1.5 from (0.1, 0.7)."""
    pi = {0.5: 0.5, 1.5: 0.1}
    spp = {0.5: 0.5, 1.5: 0.7}
    return {
        "old_log_probs": torch.log(torch.tensor([[pi[x]] * width for x in w], dtype=torch.float64)),
        "sum_pi_squared": torch.tensor([[spp[x]] * width for x in w], dtype=torch.float64),
    }


def test_optimal_token_baseline_hand_values() -> None:
    # group g: traj0 3 tokens, reward 1 at the end, w = 0.5 -> W0 = [0.5, 1.0, 1.5], G0 = [1, 1, 1]
    #          traj1 2 tokens, reward 0,            w = 1.5 -> W1 = [1.5, 3.0],      G1 = [0, 0]
    # B_0 = (1 * 0.5 + 0 * 1.5) / 2.0 = 0.25;  B_1 = (1 * 1.0 + 0) / 4.0 = 0.25
    # B_2: only traj0; it is strictly the longest, so its baseline past length 2 is 0 (zero tail)
    # A0 = [0.75, 0.75, 1.0], A1 = [-0.25, -0.25]; traj2 alone in group h: A = G = [0.7, 0.7]
    rewards, mask = _outcome([1.0, 0.0, 0.7], [3, 2, 2], 3)
    inputs = _otb_inputs([0.5, 1.5, 0.5], 3)
    adv, ret = compute_advantage(
        "optimal_token_baseline", token_level_rewards=rewards, response_mask=mask, index=["g", "g", "h"], inputs=inputs
    )
    torch.testing.assert_close(
        adv, torch.tensor([[0.75, 0.75, 1.0], [-0.25, -0.25, 0], [0.7, 0.7, 0]], dtype=torch.float64)
    )
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1, 1], [0, 0, 0], [0.7, 0.7, 0]], dtype=torch.float64))
    # without the zero tail B_2 = 1.5 / 1.5 = 1 and A0[2] = 0
    adv, _ = compute_advantage(
        "optimal_token_baseline",
        token_level_rewards=rewards,
        response_mask=mask,
        index=["g", "g", "h"],
        inputs=inputs,
        handle_zero_tail=False,
    )
    assert adv[0, 2].item() == pytest.approx(0.0, abs=1e-8)
    with pytest.raises(ValueError, match="sum_pi_squared"):
        compute_advantage(
            "optimal_token_baseline", token_level_rewards=rewards, response_mask=mask, index=["g", "g", "h"]
        )


def test_tir_optimal_token_baseline_aligns_by_valid_token() -> None:
    # traj0 mask [1, 0, 1, 1] (a tool token at t1), reward 1 at t3, w = 0.5; traj1 mask [1, 1, 0, 0], reward 0, w = 1.5
    # TIR aligns valid tokens: traj0 k = 0, 1, 2 has W = [0.5, 1.0, 1.5] -> the baselines of the test above,
    #   [0.25, 0.25, 0 (tail)] -> A0 = [0.75, -, 0.75, 1.0] at t0, t2, t3
    # position-aligned OTB: B_t0 = 0.25; t1 only traj1 (B = 0 * 3 / 3 = 0); t2, t3 past traj1's length 2
    #   -> 0 (tail) -> A0 = [0.75, -, 1.0, 1.0], A1 = [-0.25, 0]
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros(2, 4, dtype=torch.float64)
    rewards[0, 3] = 1.0
    inputs = _otb_inputs([0.5, 1.5], 4)
    tir, ret = compute_advantage(
        "tir_optimal_token_baseline", token_level_rewards=rewards, response_mask=mask, index=[0, 0], inputs=inputs
    )
    torch.testing.assert_close(tir, torch.tensor([[0.75, 0, 0.75, 1.0], [-0.25, -0.25, 0, 0]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.float64))
    otb, _ = compute_advantage(
        "optimal_token_baseline", token_level_rewards=rewards, response_mask=mask, index=[0, 0], inputs=inputs
    )
    torch.testing.assert_close(otb, torch.tensor([[0.75, 0, 1.0, 1.0], [-0.25, 0, 0, 0]], dtype=torch.float64))


# ---------------------------------------------------------------- verl's formulas, independently


def _batch(seed: int, holes: bool = False) -> dict[str, np.ndarray]:
    """Random padded batch, groups of 1-4 samples, outcome rewards; ``holes``: masked tokens inside rows."""
    rng = np.random.default_rng(seed)
    sizes = [3, 1, 4, 2]
    index = np.array([g for g, n in enumerate(sizes) for _ in range(n)])
    b, r = len(index), 6
    lengths = rng.integers(1, r + 1, size=b)
    mask = (np.arange(r)[None, :] < lengths[:, None]).astype(np.float64)
    if holes:
        mask[:, 1] *= rng.integers(0, 2, size=b)
        mask[:, 0] = 1.0
    rewards = np.zeros((b, r))
    last = np.array([np.nonzero(m)[0].max() for m in mask])
    rewards[np.arange(b), last] = rng.integers(0, 3, size=b) * 0.5
    return {
        "index": index,
        "mask": mask,
        "rewards": rewards,
        "components": rng.integers(0, 2, size=(2, b)) * 1.0,
        "old_log_probs": np.log(rng.uniform(0.05, 0.95, size=(b, r))),
        "sum_pi_squared": rng.uniform(0.1, 0.9, (b, r)),
    }


def _verl_grpo_scores(scores: np.ndarray, index: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    groups = defaultdict(list)
    for i, g in enumerate(index):
        groups[g].append(scores[i])
    out = np.zeros_like(scores)
    for i, g in enumerate(index):
        vals = np.array(groups[g])
        mean, std = (0.0, 1.0) if len(vals) == 1 else (vals.mean(), vals.std(ddof=1))
        out[i] = (scores[i] - mean) / (std + eps)
    return out


def _verl_rloo_scores(scores: np.ndarray, index: np.ndarray) -> np.ndarray:
    out = np.zeros_like(scores)
    for i, g in enumerate(index):
        members = [j for j in range(len(index)) if index[j] == g]
        if len(members) > 1:
            out[i] = scores[i] - sum(scores[j] for j in members if j != i) / (len(members) - 1)
    return out


def _whiten(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    vals = x[mask != 0]
    return (x - vals.mean()) / np.sqrt(vals.var(ddof=1) + 1e-8) * mask


def _w_cumulative(d: dict[str, np.ndarray]) -> np.ndarray:
    w = 1 - 2 * np.exp(d["old_log_probs"]) + d["sum_pi_squared"]
    return np.cumsum(w * d["mask"], axis=1)


def _returns(d: dict[str, np.ndarray]) -> np.ndarray:
    return np.cumsum((d["rewards"] * d["mask"])[:, ::-1], axis=1)[:, ::-1]


def _zero_tail(base: np.ndarray, members: list[int], lengths: np.ndarray) -> None:
    lens = sorted(lengths[j] for j in members)
    longest = [j for j in members if lengths[j] == lens[-1]]
    if len(longest) == 1 and lens[-1] > lens[-2]:
        base[longest[0], int(lens[-2]) :] = 0.0


def _verl_otb(d: dict[str, np.ndarray]) -> np.ndarray:
    mask, index = d["mask"], d["index"]
    ret, cum_w = _returns(d), _w_cumulative(d)
    base = np.zeros_like(ret)
    for g in np.unique(index):
        members = list(np.nonzero(index == g)[0])
        if len(members) == 1:
            continue
        for t in range(mask.shape[1]):
            num = sum(ret[j, t] * cum_w[j, t] * mask[j, t] for j in members)
            den = sum(cum_w[j, t] * mask[j, t] for j in members) + 1e-8
            for j in members:
                base[j, t] = num / den
        _zero_tail(base, members, mask.sum(1))
    return (ret - base) * mask


def _verl_tir_otb(d: dict[str, np.ndarray]) -> np.ndarray:
    mask, index = d["mask"], d["index"]
    ret, cum_w = _returns(d), _w_cumulative(d)
    rows = [np.nonzero(m)[0] for m in mask]
    lengths = np.array([len(p) for p in rows])
    width = lengths.max()
    c_ret, c_w = np.zeros((len(mask), width)), np.zeros((len(mask), width))
    for i, pos in enumerate(rows):
        c_ret[i, : len(pos)], c_w[i, : len(pos)] = ret[i, pos], cum_w[i, pos]
    base = np.zeros_like(c_ret)
    for g in np.unique(index):
        members = [j for j in np.nonzero(index == g)[0] if lengths[j] > 0]
        if len(members) < 2:
            continue
        b_star = sum(c_ret[j] * c_w[j] for j in members) / (sum(c_w[j] for j in members) + 1e-8)
        for j in members:
            base[j] = b_star
        _zero_tail(base, members, lengths)
    adv = np.zeros_like(ret)
    for i, pos in enumerate(rows):
        adv[i, pos] = (c_ret - base)[i, : len(pos)]
    return adv


def _reference(name: str, d: dict[str, np.ndarray]) -> np.ndarray:
    scores, mask, index = (d["rewards"] * d["mask"]).sum(1), d["mask"], d["index"]
    if name == "grpo_vectorized":
        return _verl_grpo_scores(scores, index)[:, None] * mask
    if name == "rloo_vectorized":
        return _verl_rloo_scores(scores, index)[:, None] * mask
    if name == "gdpo":
        total = _verl_grpo_scores(d["components"][0], index) + 0.5 * _verl_grpo_scores(d["components"][1], index)
        return _whiten(total[:, None] * mask, mask)
    return _verl_otb(d) if name == "optimal_token_baseline" else _verl_tir_otb(d)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "name", ["grpo_vectorized", "rloo_vectorized", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline"]
)
def test_matches_an_independent_implementation_of_verls_formula(name: str, seed: int) -> None:
    d = _batch(seed, holes=name == "tir_optimal_token_baseline")
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    inputs = {
        "reward_components": t(d["components"]),
        "old_log_probs": t(d["old_log_probs"]),
        "sum_pi_squared": t(d["sum_pi_squared"]),
    }
    adv, _ = compute_advantage(
        name,
        token_level_rewards=t(d["rewards"]),
        response_mask=t(d["mask"]),
        index=d["index"].tolist(),
        config=AdvantageConfig(gdpo_reward_weights=(1.0, 0.5)),
        inputs=inputs,
    )
    torch.testing.assert_close(adv, t(_reference(name, d)), rtol=1e-7, atol=1e-7)
