"""Small tensor helpers shared by data, model forwards and rollout engines."""

from __future__ import annotations

import torch


def position_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``position_ids = clip(cumsum(mask) − 1, 0)``: 0 on left padding, then 0, 1, 2, ...

    A left-padded row [PAD, PAD, a, b] gets [0, 0, 0, 1], so the first real token is at
    position 0 as in the unpadded sequence (arange positions would shift
    left-padded rows).

    Args:
        attention_mask: `(..., T)` 1 on real tokens.

    Returns:
        `(..., T)` int64 positions.
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)
