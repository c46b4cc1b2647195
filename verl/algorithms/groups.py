"""Per-group statistics of sequence scores, grouped by id (uid), never by position.

One vectorised implementation (scatter / index_add over group ids) serves every group-based
advantage estimator, so no two code paths can disagree on ragged or singleton groups.
Statistics are computed in float64: the mean of n identical float32 values is then exact, so a
constant group has exactly zero spread.

Unscorable samples (score NaN) are excluded from every statistic; estimators give them
advantage 0.

Zero spread is decided on the range, never on a computed std: ``np.std([0.1] * 3)`` is
1.4e-17, not 0, because the mean of identical values is rounded. A group has zero spread when
``max − min <= ZERO_SPREAD_TOL · max(1, |max|, |min|)`` (`zero_spread`), so values equal up to
float64 round-off (``0.1 + 0.2`` and ``0.3``) form one constant group, while distinct rewards,
even float32 neighbours (relative gap ≥ 6e-8), do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["ZERO_SPREAD_TOL", "GroupStats", "group_ids", "group_stats", "zero_spread"]

ZERO_SPREAD_TOL = 1e-9
"""Relative tolerance of `zero_spread` (absolute for values within [−1, 1])."""


def zero_spread(gmax: Any, gmin: Any) -> Any:
    """Whether a group's values are all equal up to round-off (module docstring).

    Args:
        gmax: the group's largest value(s), a float, NumPy array or tensor.
        gmin: the smallest value(s), same type and shape.

    Returns:
        bool (or a bool array / tensor): ``gmax − gmin <= ZERO_SPREAD_TOL · max(1, |gmax|, |gmin|)``.
        A group without values (max −inf, min +inf) counts as zero spread.
    """
    if isinstance(gmax, torch.Tensor):
        scale = torch.maximum(gmax.abs(), gmin.abs()).clamp(min=1.0)
    else:
        scale = np.maximum(np.maximum(np.abs(gmax), np.abs(gmin)), 1.0)
    return (gmax - gmin) <= ZERO_SPREAD_TOL * scale


def group_ids(index: np.ndarray | torch.Tensor | Sequence[Any] | None, batch_size: int) -> torch.Tensor:
    """Map arbitrary hashable group keys (uids) to dense ids 0..G−1 in order of first appearance.

    Args:
        index: `(B,)` group key per sample (strings, ints, ...).
        batch_size: B, checked against ``len(index)``.

    Returns:
        `(B,)` int64 tensor of dense group ids.

    Raises:
        ValueError: if ``index`` is None or its length is not B.
    """
    if index is None:
        raise ValueError("this advantage estimator needs `index` (B,): the group id (uid) of each sample")
    keys = index.tolist() if isinstance(index, (np.ndarray, torch.Tensor)) else list(index)
    if len(keys) != batch_size:
        raise ValueError(f"index has {len(keys)} entries but the batch has {batch_size} samples")
    dense: dict[Any, int] = {}
    ids = [dense.setdefault(k, len(dense)) for k in keys]
    return torch.tensor(ids, dtype=torch.long)


@dataclass(frozen=True)
class GroupStats:
    """Per-sample views of the statistics of the sample's group, all `(B,)` float64.

    Attributes:
        valid: `(B,)` bool, the sample's score is finite (scorable).
        count: number of scorable samples in the group.
        size: number of samples in the group, scorable or not.
        total: Σ of scorable scores in the group.
        mean: total / count (0 when count is 0).
        std: unbiased (Bessel) standard deviation; 0 when count < 2.
        max: largest scorable score (−inf when none).
        min: smallest scorable score (+inf when none).
    """

    valid: torch.Tensor
    count: torch.Tensor
    size: torch.Tensor
    total: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    max: torch.Tensor
    min: torch.Tensor

    @property
    def no_spread(self) -> torch.Tensor:
        """`(B,)` bool: the group's scorable scores are all equal up to round-off (`zero_spread`)."""
        return zero_spread(self.max, self.min)

    @property
    def constant(self) -> torch.Tensor:
        """`(B,)` bool: the group has fewer than two scorable samples or zero spread (`no_spread`)."""
        return (self.count < 2) | self.no_spread


def group_stats(scores: torch.Tensor, ids: torch.Tensor) -> GroupStats:
    """Group statistics of ``scores`` broadcast back to each sample.

    Args:
        scores: `(B,)` sequence scores (any float dtype; NaN = unscorable).
        ids: `(B,)` dense group ids from `group_ids`.

    Returns:
        `GroupStats` with `(B,)` float64 fields.
    """
    ids = ids.to(scores.device)
    x = scores.detach().double()
    valid = torch.isfinite(x)
    xv = torch.where(valid, x, torch.zeros_like(x))
    n_groups = int(ids.max()) + 1 if ids.numel() else 0
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=x.device)
    count = zeros.index_add(0, ids, valid.double())
    size = zeros.index_add(0, ids, torch.ones_like(x))
    total = zeros.index_add(0, ids, xv)
    mean = total / count.clamp(min=1)
    dev2 = torch.where(valid, (xv - mean[ids]) ** 2, torch.zeros_like(x))
    # Bessel's correction; a group with < 2 scorable samples has no spread (not NaN).
    var = zeros.index_add(0, ids, dev2) / (count - 1).clamp(min=1)
    inf = torch.full_like(zeros, float("inf"))
    gmax = (-inf).scatter_reduce(0, ids, torch.where(valid, xv, -torch.inf), "amax", include_self=True)
    gmin = inf.scatter_reduce(0, ids, torch.where(valid, xv, torch.inf), "amin", include_self=True)
    return GroupStats(
        valid=valid,
        count=count[ids],
        size=size[ids],
        total=total[ids],
        mean=mean[ids],
        std=var.sqrt()[ids],
        max=gmax[ids],
        min=gmin[ids],
    )
