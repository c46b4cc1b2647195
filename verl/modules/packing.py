"""Padding-free (packed) training forwards: ``model.use_remove_padding`` (verl's key).

The real tokens of a micro-batch (``attention_mask == 1``) are concatenated into one row of
N = Σ L_i tokens, each sequence keeping its own position ids (0, 1, ... under any padding),
and the model is called with ``attention_mask=None``. Transformers (masking_utils,
``find_packed_sequence_indices``) then reads a new sequence wherever the position ids do not
increase by one and builds a block-diagonal causal mask, so no token attends across sequences;
on GPU with flash-attention the same position ids select the varlen kernel. Nothing is computed
for padding: the transformer body runs on N tokens instead of B·T, and the LM head runs only on
the K positions that score a real response token (``logits_to_keep`` given as an index tensor),
never on the padded tail of short responses.

Results are scattered back to verl's `(B, R)` layout, 0 on padding (the padded forward leaves
finite garbage there; both are masked by ``response_mask``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PackedResponses", "pack_responses", "unpack_responses"]


@dataclass(frozen=True)
class PackedResponses:
    """A micro-batch packed into one row, with the map back to `(B, R)`.

    Attributes:
        input_ids: `(1, N)` the real tokens of every sequence, in row order.
        position_ids: `(1, N)` each sequence's own positions.
        score_index: `(K,)` int64 packed positions whose output scores a response token (the
            position right before it), one per real response token.
        labels: `(K,)` the response tokens scored there.
        rows: `(K,)` and cols: `(K,)` where each result goes in the `(B, R)` output.
        shape: (B, R).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    score_index: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]


def pack_responses(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, response_length: int,
) -> PackedResponses:
    """Pack the real tokens of `(B, T)` prompt + response rows into one row (any left / right padding).

    Example: rows ``[pad, a, b | c, d]`` and ``[e, f, g | h, pad]`` (P = 3, R = 2) pack to
    ``[a, b, c, d, e, f, g, h]`` with positions ``[0, 1, 2, 3, 0, 1, 2, 3]``; the response tokens
    c, d, h are scored at packed positions 1, 2, 6 and go to (0, 0), (0, 1), (1, 0).

    Args:
        input_ids: `(B, T)` ids, T = P + R.
        attention_mask: `(B, T)` 1 on real tokens.
        position_ids: `(B, T)` positions (0 at each sequence's first real token).
        response_length: R.

    Returns:
        The `PackedResponses`.

    Raises:
        ValueError: a real response token has no real token before it in its row (nothing to
            score it from).
    """
    mask = attention_mask.bool()
    lengths = mask.sum(dim=1)
    offsets = lengths.cumsum(0) - lengths
    # packed position of every real token: its row's offset + its rank among the row's real tokens
    packed_at = offsets.unsqueeze(1) + mask.long().cumsum(dim=1) - 1
    batch, total = input_ids.shape
    response = mask[:, total - response_length:]
    rows, cols = response.nonzero(as_tuple=True)
    score_index = packed_at[rows, cols + total - response_length] - 1
    if bool((score_index < offsets[rows]).any()):
        raise ValueError("use_remove_padding: a response token has no real token before it (empty prompt?)")
    return PackedResponses(
        input_ids=input_ids[mask].unsqueeze(0), position_ids=position_ids[mask].unsqueeze(0),
        score_index=score_index, labels=input_ids[rows, cols + total - response_length],
        rows=rows, cols=cols, shape=(batch, response_length),
    )


def unpack_responses(values: torch.Tensor, packed: PackedResponses) -> torch.Tensor:
    """Scatter `(K,)` per-response-token results back to `(B, R)`, 0 on padding (differentiable)."""
    out = values.new_zeros(packed.shape)
    return out.index_put((packed.rows, packed.cols), values)
