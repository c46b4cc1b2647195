"""Padding-free (packed) training forwards: ``model.use_remove_padding`` (verl's key).

The real tokens of a micro-batch (``attention_mask == 1``) are packed into a few rows of at most
``L_max`` tokens (the longest sequence), first-fit by decreasing length, each sequence keeping its
own position ids (0, 1, ...), and the model is called with ``attention_mask=None``. Transformers
(masking_utils, ``find_packed_sequence_indices``) reads a new sequence wherever the position ids
do not increase by one and builds a block-diagonal causal mask, so no token attends across
sequences; on GPU with flash-attention the same position ids select the varlen kernel. A row's
unused tail gets positions 0, 1, ... of its own: a separate block whose outputs are never read.

Why rows of ``L_max`` and not one row: attention over one packed row of N tokens costs N² (a dense
block-diagonal mask on CPU / sdpa), while rows of ``L_max`` cost at most N · L_max, never more
than the padded layout's B · T². Measured on the built-in task (256 sequences of ≤ 24 tokens),
one row made the update 11x slower than padding; rows of L_max made it faster.

The LM head runs only on the K positions that score a real response token (``logits_to_keep``
as a boolean `(rows, L)` mask, which transformers >= 5 flattens to `(K, H)`), never on prompts or
on the padded tail of short responses. Results are scattered back to verl's `(B, R)` layout, 0 on
padding (the padded forward leaves finite garbage there; both are masked by ``response_mask``).
`pack_targets` scores any marked tokens of a row (the supervised trainers' loss masks), results in `(B, T)`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

__all__ = ["PackedResponses", "check_packing_separates", "pack_responses", "pack_targets", "unpack_responses"]


@dataclass(frozen=True)
class PackedResponses:
    """A micro-batch packed into rows, with the map back to `(B, R)`.

    Attributes:
        input_ids: `(rows, L)` real tokens of the sequences, 0 in row tails.
        position_ids: `(rows, L)` each sequence's own positions (row tails: 0, 1, ...).
        score_mask: `(rows, L)` bool, True at the K positions whose output scores a response
            token (the position right before it); row-major order = the order of ``labels``.
        labels: `(K,)` the response tokens scored there.
        rows: `(K,)` and cols: `(K,)` where each result goes in the output of ``shape``.
        shape: (B, R) for `pack_responses`, (B, T) for `pack_targets`.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    score_mask: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]


def _first_fit(lengths: list[int], cap: int) -> tuple[list[int], list[int], list[int]]:
    """First-fit decreasing bin packing: (row, start column) per sequence, and each row's fill.

    Rows are scanned from ``open_from``, the first row that still has room for the shortest
    sequence (rows before it are full for every later, no longer, sequence): the same rows as a
    scan from row 0, without re-reading the full rows (256 sequences: 2 ms -> 0.3 ms).
    """
    row_of, start_of, fill = [0] * len(lengths), [0] * len(lengths), []
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    shortest = lengths[order[-1]] if order else 0
    open_from = 0
    for i in order:
        n = lengths[i]
        row = next((r for r in range(open_from, len(fill)) if fill[r] + n <= cap), len(fill))
        if row == len(fill):
            fill.append(0)
        row_of[i], start_of[i] = row, fill[row]
        fill[row] += n
        while open_from < len(fill) and fill[open_from] + shortest > cap:
            open_from += 1
    return row_of, start_of, fill


def pack_targets(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
) -> PackedResponses:
    """Pack the real tokens of `(B, T)` rows (any left / right padding) into rows; score the ``targets``.

    The general form of `pack_responses`: ``targets`` marks the tokens whose log-probs are wanted
    anywhere in a row (an SFT loss mask, a DPO response), not only the last R columns. Each target
    token is scored by the output at the real token before it.

    Example: rows ``[a, b, c, pad]`` and ``[d, e, pad, pad]`` with targets ``c`` and ``e``
    (lengths 3 and 2, rows of 3 tokens) pack to ``[[a, b, c], [d, e, 0]]``, positions
    ``[[0, 1, 2], [0, 1, 0]]``; c is scored at (0, 1), e at (1, 0), and the results go back to
    (0, 2) and (1, 1) of the `(B, T)` output.

    Args:
        input_ids: `(B, T)` ids.
        attention_mask: `(B, T)` 1 on real tokens.
        position_ids: `(B, T)` positions (0 at each sequence's first real token).
        targets: `(B, T)` bool, True on the real tokens to score.

    Returns:
        The `PackedResponses`, ``shape`` = (B, T), ``rows`` / ``cols`` in `(B, T)` coordinates.

    Raises:
        ValueError: a target is not a real token, or has no real token before it in its row.
    """
    # the packing plan is built on the CPU (a few small index tensors); the forward moves the rows
    input_ids, position_ids, mask = input_ids.cpu(), position_ids.cpu(), attention_mask.cpu().bool()
    targets = targets.cpu().bool()
    if bool((targets & ~mask).any()):
        raise ValueError("use_remove_padding: a scored token is padding (attention_mask 0)")
    batch, total = input_ids.shape
    lengths = mask.sum(dim=1)
    row_l, start_l, fill = _first_fit(lengths.tolist(), max(int(lengths.max()), 1))
    row_of, start_of = torch.tensor(row_l), torch.tensor(start_l)
    width = max(fill)
    # packed column of every real token: its sequence's start + its rank among the row's real tokens
    col_at = start_of.unsqueeze(1) + mask.long().cumsum(dim=1) - 1
    seq, tok = mask.nonzero(as_tuple=True)
    ids = input_ids.new_zeros(len(fill), width)
    ids[row_of[seq], col_at[seq, tok]] = input_ids[seq, tok]
    pos = (torch.arange(width).unsqueeze(0) - torch.tensor(fill).unsqueeze(1)).clamp(min=0).to(position_ids.dtype)
    pos[row_of[seq], col_at[seq, tok]] = position_ids[seq, tok]
    rows, cols = targets.nonzero(as_tuple=True)
    score_col = col_at[rows, cols] - 1
    if bool((score_col < start_of[rows]).any()):
        raise ValueError("use_remove_padding: a scored token has no real token before it (empty prompt?)")
    order = torch.argsort(row_of[rows] * width + score_col)  # row-major, as transformers flattens the mask
    rows, cols, score_col = rows[order], cols[order], score_col[order]
    score_mask = torch.zeros(len(fill), width, dtype=torch.bool)
    score_mask[row_of[rows], score_col] = True
    return PackedResponses(
        input_ids=ids,
        position_ids=pos,
        score_mask=score_mask,
        labels=input_ids[rows, cols],
        rows=rows,
        cols=cols,
        shape=(batch, total),
    )


def pack_responses(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
) -> PackedResponses:
    """Pack the real tokens of `(B, T)` prompt + response rows (any left / right padding) into rows.

    `pack_targets` with the real tokens of the last R columns as targets, results in `(B, R)`.

    Example: rows ``[pad, a, b | c, d]`` and ``[e, f, g | h, pad]`` (P = 3, R = 2; lengths 4, 4,
    so rows of 4 tokens) pack to ``[[a, b, c, d], [e, f, g, h]]`` with positions
    ``[[0, 1, 2, 3], [0, 1, 2, 3]]``; c, d, h are scored at (0, 1), (0, 2), (1, 2) and go to
    (0, 0), (0, 1), (1, 0). Lengths 3 and 1 would share one row of 4: ``[x, y, z, w]``, positions
    ``[0, 1, 2, 0]``.

    Args:
        input_ids: `(B, T)` ids, T = P + R.
        attention_mask: `(B, T)` 1 on real tokens.
        position_ids: `(B, T)` positions (0 at each sequence's first real token).
        response_length: R.

    Returns:
        The `PackedResponses`, ``shape`` = (B, R).

    Raises:
        ValueError: a real response token has no real token before it in its row.
    """
    batch, total = input_ids.shape
    targets = attention_mask.cpu().bool().clone()
    targets[:, : total - response_length] = False
    packed = pack_targets(input_ids, attention_mask, position_ids, targets)
    return replace(packed, cols=packed.cols - (total - response_length), shape=(batch, response_length))


def unpack_responses(values: torch.Tensor, packed: PackedResponses) -> torch.Tensor:
    """Scatter `(K,)` per-target results back to ``packed.shape`` (`(B, R)` or `(B, T)`), 0 elsewhere
    (differentiable)."""
    out = values.new_zeros(packed.shape)
    return out.index_put((packed.rows.to(values.device), packed.cols.to(values.device)), values)


_SEPARATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> checked


def check_packing_separates(
    module: torch.nn.Module,
    run: Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], torch.Tensor],
    device: torch.device,
) -> None:
    """Refuse a model that lets packed sequences attend to each other (once per module object).

    Packing relies on the model reading sequence boundaries from the position ids (transformers'
    masking utilities do, for its own models and attention implementations); a model that builds
    a plain causal mask instead (custom or remote code) would silently train on attention across
    sequences. The probe: two short sequences (5 and 4 tokens) packed in one row must give the
    second one the outputs it gets alone, within 1e-3 (float32; 5e-2 under half precision) of the
    outputs' scale. Run in eval mode without gradient: it draws no random numbers (dropout off),
    so training and exact resume are unchanged; deterministic, so every data-parallel rank reaches
    the same verdict. Cost: two forwards of 9 and 4 tokens, once per model object.

    Args:
        module: the model (the cache key).
        run: ``run(input_ids, attention_mask, position_ids) -> (rows, L, ...)`` the forward to probe.
        device: where the probe's ids go.

    Raises:
        ConfigError: naming ``use_remove_padding`` and the largest difference.
    """
    if _SEPARATES.get(module):
        return
    first, second = torch.arange(1, 6, device=device), torch.arange(6, 10, device=device)
    packed_pos = torch.cat([torch.arange(5, device=device), torch.arange(4, device=device)])[None]
    modes = [(m, m.training) for m in module.modules()]
    module.eval()  # no dropout: the probe draws no random numbers (exact resume) and compares like with like
    try:
        with torch.no_grad():
            together = run(torch.cat([first, second])[None], None, packed_pos)[0, 5:]
            alone = run(second[None], None, torch.arange(4, device=device)[None])[0]
    finally:
        for m, training in modes:  # parents first: each module gets its own mode back, through its train()
            m.train(training)
    half = together.dtype != torch.float32 or torch.is_autocast_enabled(device.type)
    together, alone = together.float(), alone.float()
    diff, scale = float((together - alone).abs().max()), 1.0 + float(alone.abs().max())
    if diff > (5e-2 if half else 1e-3) * scale:
        from verl.config.errors import ConfigError

        raise ConfigError(
            f"use_remove_padding=true: {type(module).__name__} lets packed sequences attend to each other "
            f"(a sequence's outputs change by {diff:.3g} when packed after another one); this model or "
            "attention implementation does not read sequence boundaries from position ids: set "
            "use_remove_padding=false"
        )
    _SEPARATES[module] = True
