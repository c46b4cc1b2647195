"""Leave samples whose reward could not be computed out of the RL update.

A reward manager gives an unscored sample (the scorer raised, timed out, returned a
non-number, NaN or ±inf) the score 0.0 and flags it in ``reward_extra_info`` (see
`verl.reward.managers`). A 0.0 that is not a real reward must not train the policy, nor shift
its group's baseline, so before the advantages are computed the trainer

1. zeroes the sample's ``response_mask`` row `(R,)`: every loss (policy, value, KL) aggregates
   over ``response_mask``, so the sample contributes no token and no gradient, and every
   advantage estimator returns exactly 0 on masked positions;
2. gives it a group of its own (``uid`` + ``"/unscored"``): group estimators (GRPO, RLOO, ...)
   compute the other samples' mean / std without it, and a singleton group's advantage is 0.

With every sample of the batch unscored nothing is masked: the step then trains on zero
rewards (which gives zero group advantages), and `RLTrainer` stops the run after three such
steps in a row (`verl.reward.scoring.RewardFailurePolicy`, which also counts a step whose scorer
hung as failed).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

UNSCORED_FLAGS = ("reward_error", "reward_timeout")


def unscored_rows(reward_extra_info: dict[str, Any] | None, batch_size: int) -> torch.Tensor:
    """`(B,)` bool: the samples a reward manager flagged as errors (non-finite included) or timeouts."""
    rows = torch.zeros(batch_size, dtype=torch.bool)
    for key in UNSCORED_FLAGS:
        flags = (reward_extra_info or {}).get(key)
        if flags is not None:
            rows |= torch.as_tensor([bool(f) for f in flags], dtype=torch.bool)
    return rows


def mask_unscored_samples(batch: Any, reward_extra_info: dict[str, Any] | None) -> dict[str, float]:
    """Mask unscored samples out of the loss and out of their groups (see module docstring).

    Args:
        batch: `DataProto` with ``response_mask`` `(B, R)` and non-tensor ``uid`` `(B,)`;
            modified in place.
        reward_extra_info: the reward manager's per-sample lists.

    Returns:
        ``{"reward/num_masked": m}``, the number of samples left out of the update (0 when all
        or none are unscored).
    """
    rows = unscored_rows(reward_extra_info, len(batch))
    n_masked = int(rows.sum())
    if n_masked == 0 or n_masked == len(batch):
        return {"reward/num_masked": 0.0}
    mask = batch.batch["response_mask"]
    batch.batch["response_mask"] = mask * (~rows).to(mask.dtype).unsqueeze(-1).to(mask.device)
    uid = np.asarray(batch.non_tensor_batch["uid"], dtype=object).copy()
    for i in torch.nonzero(rows).flatten().tolist():
        uid[i] = f"{uid[i]}/unscored-{i}"
    batch.non_tensor_batch["uid"] = uid
    return {"reward/num_masked": float(n_masked)}
