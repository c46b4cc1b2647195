"""Off-policy bookkeeping of a trained batch: spans and staleness of its trajectories (verl's metrics).

A *policy version* counts the weight syncs the rollout has received (0 = the initial weights);
the actor at the start of RL step k (0-based) is version k, since one sync closes every step.
Per trajectory, over its response tokens, with ``v_min`` / ``v_max`` the oldest and newest
version that produced one of its tokens and ``v`` the version being trained:

* span = ``v_max - v_min + 1`` (1 = generated entirely by one version),
* staleness = ``v - v_max`` (lag of the freshest weights used; verl's primary metric),
* worst staleness = ``v - v_min``.

Source: verl ``verl/trainer/ppo/v1/trainer_base.py`` (``_compute_metrics``, section 5), where
``global_steps - 1`` is the version being trained.
"""

from __future__ import annotations

import torch

__all__ = ["off_policy_metrics", "trajectory_version_range"]

_PREFIX = "training/off_policy"


def trajectory_version_range(versions: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Oldest and newest version per trajectory, over its response tokens.

    Args:
        versions: `(B, R)` int64 ``rollout_policy_versions`` (the version that produced each token).
        response_mask: `(B, R)` 1 on response tokens.

    Returns:
        ``(v_min, v_max)``, each `(B,)` int64. A row without response tokens takes the range of
        all its positions (its tags are the version it was generated with).
    """
    mask = response_mask.bool()
    empty = ~mask.any(dim=-1, keepdim=True)
    mask = mask | empty  # a row with no token: every position counts
    big = torch.iinfo(torch.int64).max
    v = versions.long()
    v_min = torch.where(mask, v, torch.full_like(v, big)).min(dim=-1).values
    v_max = torch.where(mask, v, torch.full_like(v, -big)).max(dim=-1).values
    return v_min, v_max


def off_policy_metrics(versions: torch.Tensor, response_mask: torch.Tensor, trained_version: int) -> dict[str, float]:
    """verl's ``training/off_policy/trajectory_{spans,staleness,staleness_worst}/{mean,max,min}``.

    Args:
        versions: `(B, R)` int64 per-token policy versions.
        response_mask: `(B, R)`.
        trained_version: version of the actor that trains on the batch (syncs done before it).

    Returns:
        The nine metrics (floats).
    """
    v_min, v_max = trajectory_version_range(versions, response_mask)
    parts = {
        "trajectory_spans": (v_max - v_min + 1).double(),
        "trajectory_staleness": (trained_version - v_max).double(),
        "trajectory_staleness_worst": (trained_version - v_min).double(),
    }
    out: dict[str, float] = {}
    for name, values in parts.items():
        out[f"{_PREFIX}/{name}/mean"] = float(values.mean())
        out[f"{_PREFIX}/{name}/max"] = float(values.max())
        out[f"{_PREFIX}/{name}/min"] = float(values.min())
    return out
