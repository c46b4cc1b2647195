"""Clipped value-function loss for the PPO critic."""

from __future__ import annotations

import torch

from verl.algorithms.aggregation import agg_loss
from verl.algorithms.masked import masked_mean, zero_masked

__all__ = ["compute_value_loss"]


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values_old: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs: float | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped value loss (Schulman et al. 2017; as in OpenAI baselines / TRL / verl).

    V_clip = V_old + clip(V − V_old, −c, c);
    L_t = ½ · max((V − G)², (V_clip − G)²), aggregated with `agg_loss`.

    Args:
        vpreds: `(B, R)` current value predictions V (differentiable).
        returns: `(B, R)` targets G.
        values_old: `(B, R)` values V_old at rollout time.
        response_mask: `(B, R)`.
        cliprange_value: c (``critic.cliprange_value``).
        loss_agg_mode: see `agg_loss`.
        **agg_kwargs: ``global_token_count``, ``global_seq_count``, ``loss_scale_factor`` for
            `agg_loss` (gradient accumulation).

    Returns:
        (0-d loss, metrics {"vf_clipfrac": masked fraction of tokens where the clipped error is
        the larger one}). Masked slots are selected away first, so whatever they hold reaches
        neither the loss nor the gradient.
    """
    vpreds, returns, values_old = (zero_masked(t, response_mask) for t in (vpreds, returns, values_old))
    vpred_clipped = values_old + torch.clamp(vpreds - values_old, -cliprange_value, cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    per_token = torch.maximum(err_unclipped, err_clipped)
    loss = 0.5 * agg_loss(per_token, response_mask, loss_agg_mode, **agg_kwargs)
    clipfrac = masked_mean((err_clipped > err_unclipped).float(), response_mask).detach()
    return loss, {"vf_clipfrac": clipfrac}
