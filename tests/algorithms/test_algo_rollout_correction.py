"""Rollout correction (TIS / RS) and mismatch metrics against hand-computed values.

Fixture: two rows, π_train / π_rollout per token
    row 0: train [0.5, 0.2, 0.3], rollout [0.25, 0.4, 0.3], mask [1, 1, 1] → ρ = [2, 0.5, 1]
    row 1: train [0.8, 0.1, 0.7], rollout [0.2, 0.1, 0.05], mask [1, 1, 0] → ρ = [4, 1, (pad)]
"""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.rollout_correction import (
    RolloutCorrectionParams,
    apply_rollout_correction,
    parse_ratio_bounds,
    rollout_is_weights,
    rollout_mismatch_metrics,
    rollout_rejection_mask,
)

TRAIN = torch.tensor([[0.5, 0.2, 0.3], [0.8, 0.1, 0.7]]).log()
ROLLOUT = torch.tensor([[0.25, 0.4, 0.3], [0.2, 0.1, 0.05]]).log()
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_token_tis_weights_truncation_and_metrics() -> None:
    w, m = rollout_is_weights(TRAIN, ROLLOUT, MASK, "token", threshold=3.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 1.0], [3.0, 1.0, 0.0]]))  # 4 → C = 3; pad → 0
    assert m["rollout_is_mean"] == pytest.approx(1.5)  # (2 + .5 + 1 + 3 + 1) / 5
    assert m["rollout_is_max"] == pytest.approx(3.0) and m["rollout_is_min"] == pytest.approx(0.5)
    assert m["rollout_is_std"] == pytest.approx(math.sqrt(0.8))  # E[w²] 3.05 − 1.5²
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.2)  # raw 4 > 3
    assert m["rollout_is_ratio_fraction_low"] == pytest.approx(0.0)  # none < 1/3
    assert m["rollout_is_eff_sample_size"] == pytest.approx(2.25 / 3.05)
    assert not w.requires_grad


def test_sequence_tis_one_weight_per_sequence() -> None:
    w, m = rollout_is_weights(TRAIN, ROLLOUT, MASK, "sequence", threshold=3.0)
    # Π ρ: row 0 = 2·0.5·1 = 1, row 1 = 4·1 = 4 → min(4, 3) = 3
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 0.0]]))
    assert m["rollout_is_mean"] == pytest.approx(9 / 5)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # counted per sequence


def test_batch_normalize_token_and_sequence() -> None:
    w, m = rollout_is_weights(TRAIN, ROLLOUT, MASK, "token", threshold=3.0, batch_normalize=True)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 1.0], [3.0, 1.0, 0.0]]) / 1.5)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(1.5)
    w, m = rollout_is_weights(TRAIN, ROLLOUT, MASK, "sequence", threshold=3.0, batch_normalize=True)
    # mean over sequences (1 + 3) / 2 = 2
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.5, 0.5], [1.5, 1.5, 0.0]]))


def test_token_rejection() -> None:
    mask, m = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "token_k1", low=0.4, high=2.5)
    torch.testing.assert_close(mask, torch.tensor([[1, 1, 1], [0, 1, 0]]))  # ρ = 4 leaves [0.4, 2.5]
    assert mask.dtype == MASK.dtype
    assert m["rollout_rs_masked_fraction"] == pytest.approx(0.2)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(0.5)
    assert m["rollout_rs_ratio_fraction_high"] == pytest.approx(0.2)
    assert m["rollout_rs_ratio_fraction_low"] == pytest.approx(0.0)


def test_sequence_rejection_sum_and_geometric_mean() -> None:
    mask, m = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "seq_sum_k1", low=0.5, high=2.0)
    torch.testing.assert_close(mask, torch.tensor([[1, 1, 1], [0, 0, 0]]))  # Π ρ = 4 > 2
    assert m["rollout_rs_masked_fraction"] == pytest.approx(0.4)
    assert m["rollout_rs_ratio_fraction_high"] == pytest.approx(0.5)
    # geometric means: row 0 exp((ln 2 + ln .5 + 0)/3) = 1, row 1 exp(ln 4 / 2) = 2
    mask, _ = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "seq_mean_k1", low=0.5, high=1.9)
    torch.testing.assert_close(mask, torch.tensor([[1, 1, 1], [0, 0, 0]]))
    mask, _ = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "seq_mean_k1", low=0.5, high=2.1)
    torch.testing.assert_close(mask, MASK)
    mask, m = rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "seq_sum_k1", low=1.5, high=8.0)
    torch.testing.assert_close(mask, torch.tensor([[0, 0, 0], [1, 1, 0]]))  # Π ρ = 1 < 1.5
    assert m["rollout_rs_ratio_fraction_low"] == pytest.approx(0.5)


def test_rejection_then_weights_on_kept_tokens() -> None:
    params = RolloutCorrectionParams(
        rollout_is="token", is_threshold=3.0, rollout_rs="token_k1", rs_low=0.4, rs_high=2.5
    )
    w, mask, m = apply_rollout_correction(TRAIN, ROLLOUT, MASK, params)
    torch.testing.assert_close(mask, torch.tensor([[1, 1, 1], [0, 1, 0]]))
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 1.0], [0.0, 1.0, 0.0]]))
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(4.5 / 4)
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.2)
    w, mask, m = apply_rollout_correction(TRAIN, ROLLOUT, MASK, RolloutCorrectionParams())
    assert w is None and torch.equal(mask, MASK) and m == {}


def test_mismatch_metrics_hand_values() -> None:
    m = rollout_mismatch_metrics(TRAIN, ROLLOUT, MASK)
    # |Δp| on valid tokens: [0.25, 0.2, 0, 0.6, 0]
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.6)
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.21)
    assert m["training/rollout_probs_diff_std"] == pytest.approx(0.22)
    assert m["training/rollout_kl"] == pytest.approx(-math.log(4) / 5, abs=1e-6)  # mean −log ρ
    k3 = ((2 - math.log(2) - 1) + (0.5 - math.log(0.5) - 1) + (4 - math.log(4) - 1)) / 5
    assert m["training/rollout_k3_kl"] == pytest.approx(k3, abs=1e-6)
    same = rollout_mismatch_metrics(TRAIN, TRAIN, MASK)
    assert same["training/rollout_probs_diff_max"] == 0.0 and same["training/rollout_k3_kl"] == 0.0
    assert rollout_mismatch_metrics(TRAIN, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_padding_garbage_and_extreme_ratios_stay_finite() -> None:
    train = TRAIN.clone()
    train[1, 2] = float("inf")  # garbage under the mask must not leak
    rollout = ROLLOUT.clone()
    rollout[0, 0] = -1000.0  # ρ = e^{~1000}: clamped before exp
    w, m = rollout_is_weights(train, rollout, MASK, "token", threshold=5.0)
    assert torch.isfinite(w).all() and w[0, 0] == 5.0 and w[1, 2] == 0.0
    assert all(math.isfinite(v) for v in m.values())


@pytest.mark.parametrize(("spec", "bounds"), [("0.5_2.0", (0.5, 2.0)), (2.0, (0.5, 2.0)), ("4", (0.25, 4.0))])
def test_parse_ratio_bounds(spec: object, bounds: tuple[float, float]) -> None:
    assert parse_ratio_bounds(spec, "k") == pytest.approx(bounds)


@pytest.mark.parametrize("spec", [None, "x", "2.0_0.5", "-1", 0.5])
def test_parse_ratio_bounds_rejects(spec: object) -> None:
    with pytest.raises(ValueError, match="^k: "):
        parse_ratio_bounds(spec, "k")


def test_invalid_levels_are_errors() -> None:
    with pytest.raises(ValueError, match="rollout_is must be one of"):
        rollout_is_weights(TRAIN, ROLLOUT, MASK, "tokens", 2.0)
    with pytest.raises(ValueError, match="rollout_rs must be one of"):
        rollout_rejection_mask(TRAIN, ROLLOUT, MASK, "seq_max_k2", 0.5, 2.0)


def test_stage_without_old_log_probs_is_a_no_op_when_correction_is_off():
    """On-policy old-log-prob reuse leaves no ``old_log_probs`` before the update (found on a GPU
    check: the quick start crashed with KeyError); the stage then reports nothing."""
    from types import SimpleNamespace

    import torch

    from verl.protocol import DataProto
    from verl.trainer.ppo.rollout_corr import rollout_correction_stage

    batch = DataProto.from_dict(tensors={"rollout_log_probs": torch.zeros(2, 3), "response_mask": torch.ones(2, 3)})
    off = SimpleNamespace(rollout_is=None, rollout_rs=None, bypass_mode=False)
    assert rollout_correction_stage(batch, off) == {}
