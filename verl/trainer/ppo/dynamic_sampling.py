"""DAPO dynamic sampling: keep prompt groups whose metric varies; generate until the batch is full.

DAPO (Yu et al. 2025, arXiv 2503.14476, §3.2): a group whose ``rollout.n`` samples all get the
same reward (all right or all wrong) has zero advantage under a group baseline and only dilutes
the batch. With ``algorithm.filter_groups.enable`` the trainer generates batches of
``data.gen_batch_size`` prompts, keeps the groups whose ``filter_groups.metric`` varies across the
group — a group of one sample is kept — and accumulates kept groups
over generation batches until ``data.train_batch_size`` groups are there; the surplus groups of
the last generation batch are dropped. ``filter_groups.max_num_gen_batches`` > 0 bounds the
number of generation batches per step (then an error says to raise it or the batch size).

"Varies" is decided on the range, with the advantage estimators' rule
(:func:`verl.algorithms.groups.zero_spread`: ``max − min > 1e-9 · max(1, |max|, |min|)``), never as
``np.std > 0``: the std of identical float64 values is often 1e-17, not 0, so an all-correct
group of 0.1-rewards would be kept. Non-finite values are left out of the test (as the estimators
leave unscorable samples out of the group statistics); a group with fewer than two finite values
and more than one sample is dropped.

Metric values per trajectory: ``seq_reward`` / ``seq_final_reward`` = the sequence score
(Σ ``token_level_scores``; the in-reward KL is not applied before filtering), or any numeric
per-sample value the reward manager reports (``acc``, ``score``, ...).

Logged per step: ``dynamic_sampling/num_gen_batches``, ``dynamic_sampling/generated_groups``,
``dynamic_sampling/kept_groups``, ``dynamic_sampling/kept_ratio`` (kept / generated).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch

from verl.algorithms.groups import zero_spread
from verl.protocol import DataProto

__all__ = ["DynamicSampler", "kept_group_mask", "metric_values"]

SEQ_METRICS = ("seq_reward", "seq_final_reward")


def metric_values(batch: DataProto, metric: str | None) -> np.ndarray:
    """`(B,)` per-trajectory values of ``metric`` (see module docstring).

    Raises:
        KeyError: ``metric`` is neither a sequence score nor a per-sample value in the batch.
    """
    name = metric or "seq_final_reward"
    if name in SEQ_METRICS:
        return batch.batch["token_level_scores"].sum(-1).double().numpy()
    if name not in batch.non_tensor_batch:
        have = sorted(k for k, v in batch.non_tensor_batch.items() if _numeric(v))
        raise KeyError(
            f"algorithm.filter_groups.metric={name!r} is not a per-sample value of the reward; "
            f"use one of {list(SEQ_METRICS) + have}"
        )
    return np.asarray(batch.non_tensor_batch[name], dtype=np.float64)


def _numeric(values: np.ndarray) -> bool:
    try:
        np.asarray(values, dtype=np.float64)
        return True
    except (TypeError, ValueError):
        return False


def kept_group_mask(uids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, list[Any], int]:
    """Which trajectories belong to a kept group.

    Args:
        uids: `(B,)` group ids.
        values: `(B,)` metric values.

    Returns:
        (`(B,)` bool mask, kept uids in order of first appearance, number of groups).
    """
    by_uid: dict[Any, list[float]] = defaultdict(list)
    for uid, value in zip(uids, values, strict=True):
        by_uid[uid].append(float(value))
    kept = [uid for uid, vals in by_uid.items() if len(vals) == 1 or _varies(vals)]
    keep = set(kept)
    return np.array([uid in keep for uid in uids], dtype=bool), kept, len(by_uid)


def _varies(values: list[float]) -> bool:
    """Two or more finite values that are not all equal up to round-off (module docstring)."""
    finite = [v for v in values if np.isfinite(v)]
    return len(finite) >= 2 and not bool(zero_spread(max(finite), min(finite)))


class DynamicSampler:
    """Accumulates kept groups across generation batches (one instance per run).

    Args:
        metric: ``algorithm.filter_groups.metric``.
        max_num_gen_batches: ``algorithm.filter_groups.max_num_gen_batches`` (0 = no limit).
        train_batch_size: Groups (prompts) per training step.
    """

    def __init__(self, metric: str | None, max_num_gen_batches: int, train_batch_size: int) -> None:
        self.metric, self.max_num_gen_batches, self.train_batch_size = metric, max_num_gen_batches, train_batch_size
        self._reset()

    def _reset(self) -> None:
        self.parts: list[DataProto] = []
        self.kept_uids: list[Any] = []
        self.num_gen_batches = 0
        self.generated_groups = 0

    def add(self, batch: DataProto) -> tuple[DataProto | None, dict[str, float]]:
        """Filters one scored generation batch; returns the full training batch once there is one.

        Returns:
            (None, {}) while fewer than ``train_batch_size`` groups are kept; then (the batch
            of exactly ``train_batch_size`` whole groups, in order of generation, and the
            step's ``dynamic_sampling/*`` metrics), and the sampler starts over.

        Raises:
            RuntimeError: ``max_num_gen_batches`` generation batches did not fill the batch.
        """
        uids = batch.non_tensor_batch["uid"]
        mask, kept, n_groups = kept_group_mask(uids, metric_values(batch, self.metric))
        self.num_gen_batches += 1
        self.generated_groups += n_groups
        if kept:
            self.parts.append(batch[torch.from_numpy(mask)])
            self.kept_uids += kept
        if len(self.kept_uids) < self.train_batch_size:
            if 0 < self.max_num_gen_batches <= self.num_gen_batches:
                raise RuntimeError(
                    f"dynamic sampling kept {len(self.kept_uids)} of {self.train_batch_size} groups after "
                    f"{self.num_gen_batches} generation batches (algorithm.filter_groups.max_num_gen_batches); "
                    "raise it or data.gen_batch_size, or check that rewards vary within groups"
                )
            return None, {}
        full = DataProto.concat(self.parts) if len(self.parts) > 1 else self.parts[0]
        chosen = set(self.kept_uids[: self.train_batch_size])
        take = np.array([u in chosen for u in full.non_tensor_batch["uid"]], dtype=bool)
        full = full[torch.from_numpy(take)]
        metrics = {
            "dynamic_sampling/num_gen_batches": float(self.num_gen_batches),
            "dynamic_sampling/generated_groups": float(self.generated_groups),
            "dynamic_sampling/kept_groups": float(len(self.kept_uids)),
            "dynamic_sampling/kept_ratio": len(self.kept_uids) / max(1, self.generated_groups),
        }
        self._reset()
        return full, metrics
