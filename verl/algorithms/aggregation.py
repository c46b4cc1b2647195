"""Loss aggregation: the one place where a `(B, R)` per-token loss becomes a scalar.

Gradient accumulation: the normaliser of a micro-batch's loss is the
token / sequence count of the whole mini-batch (the optimizer step's window), passed in as
``global_token_count`` / ``global_seq_count``. Each micro-batch loss is then a partial sum of
the mini-batch loss, so Σ over micro-batches of `agg_loss` equals the mini-batch loss and its
gradient exactly, whatever the split and however many samples or tokens each micro-batch has.
The caller must NOT divide again by the number of micro-batches. With data parallelism the
global counts are summed over ranks and the gradient all-reduce must *sum* (or the counts be
divided by the world size when it averages).

Modes (m = mask, l = per-token loss, S = set of sequences with ≥ 1 valid token):
- ``token-mean``:              Σ_i Σ_t m l / N_tokens
- ``seq-mean-token-sum``:      Σ_i (Σ_t m l) / N_seqs
- ``seq-mean-token-mean``:     Σ_i (Σ_t m l / Σ_t m) / N_seqs
- ``seq-mean-token-sum-norm``: Σ_i (Σ_t m l / L) / N_seqs, L a configured constant (Dr.GRPO,
  arXiv 2503.20783; default ``data.max_response_length``), never the padded width.
"""

from __future__ import annotations

import torch

from verl.algorithms.masked import masked_sum

__all__ = ["LOSS_AGG_MODES", "agg_loss", "loss_normalizers"]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def loss_normalizers(loss_mask: torch.Tensor) -> tuple[float, float]:
    """Token and sequence counts of a mask, as `agg_loss` counts them.

    Compute these once on the whole mini-batch (summed over data-parallel ranks) and pass them
    to every micro-batch's `agg_loss` call.

    Args:
        loss_mask: `(B, R)` bool/float.

    Returns:
        (token_count = Σ mask, seq_count = number of rows with at least one valid token).
    """
    w = loss_mask.to(torch.float64)
    return float(w.sum()), float(((loss_mask != 0).sum(-1) > 0).sum())


def _divide(total: torch.Tensor, count: float | torch.Tensor) -> torch.Tensor:
    """total / count, and 0 (with the graph kept) when count is 0 — an empty batch has no loss."""
    count_t = torch.as_tensor(count, dtype=total.dtype, device=total.device)
    safe = torch.where(count_t != 0, count_t, torch.ones_like(count_t))
    return torch.where(count_t != 0, total / safe, total * 0)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    global_token_count: float | torch.Tensor | None = None,
    global_seq_count: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss into a scalar (see module docstring for the formulas).

    Args:
        loss_mat: `(B, R)` per-token loss.
        loss_mask: `(B, R)` bool/float, 1 where a token counts; padded slots may hold anything.
        loss_agg_mode: one of `LOSS_AGG_MODES`.
        global_token_count: tokens in the whole mini-batch (token-mean); None = this tensor's own.
        global_seq_count: sequences in the whole mini-batch (seq-* modes); None = this tensor's own
            (rows with at least one valid token).
        loss_scale_factor: L for ``seq-mean-token-sum-norm`` (required there): the configured
            constant, e.g. ``data.max_response_length``.

    Returns:
        0-d loss tensor.

    Raises:
        ValueError: unknown mode (lists the valid ones), or ``seq-mean-token-sum-norm`` without
            a positive ``loss_scale_factor``.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")
    own_tokens, own_seqs = loss_normalizers(loss_mask)
    if loss_agg_mode == "token-mean":
        count = own_tokens if global_token_count is None else global_token_count
        return _divide(masked_sum(loss_mat, loss_mask), count)
    seq_count = own_seqs if global_seq_count is None else global_seq_count
    seq_sums = masked_sum(loss_mat, loss_mask, axis=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        return _divide(seq_sums.sum(), seq_count)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_tokens = loss_mask.to(loss_mat.dtype).sum(-1)
        seq_means = torch.where(seq_tokens > 0, seq_sums / seq_tokens.clamp(min=1e-12), seq_sums * 0)
        return _divide(seq_means.sum(), seq_count)
    if loss_scale_factor is None or loss_scale_factor <= 0:
        raise ValueError(
            "seq-mean-token-sum-norm needs loss_scale_factor = the configured constant L "
            "(default data.max_response_length), never the padded tensor width"
        )
    return _divide(seq_sums.sum() / loss_scale_factor, seq_count)
