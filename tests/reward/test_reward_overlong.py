"""DAPO overlong penalty (B25)."""

from __future__ import annotations

import pytest
import torch

from verl.reward.overlong import OverlongBufferConfig, overlong_penalty


def test_reward_overlong_b25_penalty_by_length() -> None:
    """B25: max 20, buffer 4, factor 1: 15 -> 0, 16 -> 0, 17 -> -0.25, 18 -> -0.5, 20 -> -1."""
    lengths = torch.tensor([15, 16, 17, 18, 20])
    penalty = overlong_penalty(lengths, max_response_length=20, buffer_len=4, penalty_factor=1.0)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0]), atol=1e-5, rtol=0)
    assert 1.0 + penalty[3].item() == pytest.approx(0.5)  # correct answer at length 18


def test_reward_overlong_penalty_factor_scales_linearly() -> None:
    penalty = overlong_penalty(torch.tensor([18, 20]), max_response_length=20, buffer_len=4, penalty_factor=0.5)
    torch.testing.assert_close(penalty, torch.tensor([-0.25, -0.5]), atol=1e-5, rtol=0)


def test_reward_overlong_disabled_never_validates() -> None:
    """B25: enable=False with no max length and a zero buffer raises nothing."""
    OverlongBufferConfig().validate(None)
    OverlongBufferConfig(enable=False, len=0, penalty_factor=-3.0).validate(None)


@pytest.mark.parametrize(
    ("config", "max_len", "match"),
    [
        (OverlongBufferConfig(enable=True, len=4), None, "max_response_length"),
        (OverlongBufferConfig(enable=True, len=0), 20, "len"),
        (OverlongBufferConfig(enable=True, len=21), 20, "len"),
        (OverlongBufferConfig(enable=True, len=4, penalty_factor=-1.0), 20, "penalty_factor"),
    ],
)
def test_reward_overlong_enabled_validation(config: OverlongBufferConfig, max_len: int | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config.validate(max_len)
