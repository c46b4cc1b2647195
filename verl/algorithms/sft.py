"""Supervised fine-tuning loss: next-token negative log-likelihood on response tokens.

``L = −Σ_{b,t} m_{b,t} · log π(y_{b,t} | y_{b,<t}) / N``, with ``m`` the loss mask (1 on
response / assistant tokens only) and ``N`` the number of loss tokens of the *whole* optimizer
step (every micro-batch on every data-parallel rank). Dividing by the global ``N`` rather than
the micro-batch's own count makes the summed micro-batch losses equal the token mean of the
full batch, so micro-batching and the number of ranks never change the gradient
(the same rule as ``agg_loss(..., "token-mean", global_token_count=N)``).
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_sum

__all__ = ["sft_loss"]


def sft_loss(
    log_probs: torch.Tensor, loss_mask: torch.Tensor, global_token_count: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-mean SFT loss of one micro-batch, normalised by the global token count.

    Args:
        log_probs: `(B, L)` float log π of each target token (L = T − 1 for a sequence of T).
        loss_mask: `(B, L)` 1 where the target token is a response / assistant token, else 0.
        global_token_count: N > 0, ``loss_mask`` summed over the whole optimizer step (all
            micro-batches, all data-parallel ranks).

    Returns:
        (loss, metrics): ``loss`` a scalar tensor, ``−Σ m·log π / N``; ``metrics`` holds
        ``tokens`` (this micro-batch's loss-token count) and ``nll_sum`` (its summed NLL), so
        per-rank sums add up to global figures.

    Raises:
        ValueError: ``global_token_count`` ≤ 0 (a step without any response token).
    """
    if global_token_count <= 0:
        raise ValueError("sft_loss: the optimizer step has no loss tokens (every response is empty or truncated away)")
    mask = loss_mask.to(log_probs.dtype)
    nll_sum = -masked_sum(log_probs, mask)  # selected: a NaN / -inf log-prob off the mask never counts
    return nll_sum / global_token_count, {"tokens": float(mask.sum()), "nll_sum": float(nll_sum.detach())}
