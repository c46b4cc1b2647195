"""Running a packed forward on whole rows or, under Ulysses sequence parallelism, on a column slice.

`run_packed` is the one place where a packed micro-batch (`verl.modules.packing.PackedResponses`)
meets the model. Without an active SP group it calls the forward on the packed rows as they are.
Inside `verl.modules.ulysses.sequence_parallel` with a group of ``sp`` ranks, the rows `(rows, L)`
are padded on the right to ``Lp = sp · ceil(L / sp)`` columns (ids 0, positions 0, 1, ...: a block
of its own that no real token attends to, and never scored), rank r keeps the striped columns
``r, r + sp, r + 2·sp, ...`` (`verl.modules.ulysses.striped_columns`: the scored response tokens at
the end of every sequence spread over the group, so each rank's LM head scores about K / sp of
them), the forward runs on them (its attention layers exchange
heads for columns, `verl.modules.ulysses`), and each per-position output is scattered into a
`(rows, Lp / sp)` slice, gathered along the columns and read at the scored positions: the same
`(K,)` values, in the same row-major order, as the forward on whole rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from verl.modules.packing import PackedResponses
from verl.modules.ulysses import active_group, gather_seq, natural_order, sp_rank_and_size, striped_columns

__all__ = ["refuse_padded_under_sp", "run_packed", "split_forward_count"]

_SPLIT = {"forwards": 0}


def split_forward_count() -> int:
    """Packed forwards of this process that ran split over an SP group (a counter, for metrics)."""
    return _SPLIT["forwards"]


# forward(input_ids (rows, l), position_ids (rows, l), keep (rows, l) bool, labels (k,)) -> (k,) outputs (or None)
PackedForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], Sequence["torch.Tensor | None"]]


def run_packed(packed: PackedResponses, device: torch.device, forward: PackedForward) -> list[torch.Tensor | None]:
    """The forward's `(K,)` outputs at ``packed.score_mask`` (row-major), split over the active SP group if any.

    Args:
        packed: the packed micro-batch.
        device: where the rows go.
        forward: ``forward(ids, pos, keep, labels)`` returning per-scored-position tensors `(k,)`
            for the k True entries of ``keep`` (row-major), ``labels`` `(k,)` their targets.

    Returns:
        The forward's outputs over all K scored positions (None stays None). Differentiable; under
        SP the gradient reaches this rank's columns only (every rank computes the same loss).
    """
    ids, pos, keep = packed.input_ids, packed.position_ids, packed.score_mask
    group = active_group()
    if group is None:
        return list(forward(ids.to(device), pos.to(device), keep.to(device), packed.labels.to(device)))
    rank, sp = sp_rank_and_size(group)
    _SPLIT["forwards"] += 1
    rows, width = ids.shape
    padded = -(-width // sp) * sp
    labels = torch.zeros(rows, width, dtype=packed.labels.dtype)
    labels[keep] = packed.labels
    if padded != width:
        extra = padded - width
        tail = torch.arange(extra, dtype=pos.dtype).expand(rows, extra)
        ids, pos = torch.cat([ids, ids.new_zeros(rows, extra)], 1), torch.cat([pos, tail], 1)
        keep, labels = (
            torch.cat([keep, keep.new_zeros(rows, extra)], 1),
            torch.cat([labels, labels.new_zeros(rows, extra)], 1),
        )
    cols = striped_columns(padded, rank, sp)
    keep_local = keep[:, cols].to(device)
    outs = forward(ids[:, cols].to(device), pos[:, cols].to(device), keep_local, labels[:, cols].to(device)[keep_local])
    where = keep_local.nonzero(as_tuple=True)  # row-major: the order of the forward's outputs
    full_keep = keep.to(device)
    order = natural_order(padded, sp, full_keep.device)
    result: list[torch.Tensor | None] = []
    for out in outs:
        if out is None:
            result.append(None)
            continue
        local = out.new_zeros(rows, padded // sp).index_put(where, out)
        result.append(gather_seq(local, 1, group)[:, order][full_keep])
    return result


def refuse_padded_under_sp(what: str) -> None:
    """Raise when a padded (not packed) forward is asked for inside an SP block.

    Raises:
        RuntimeError: every SP forward is packed (``use_remove_padding=true``); ``what`` names the caller.
    """
    if active_group() is not None:
        raise RuntimeError(
            f"{what}: a padded forward under ulysses_sequence_parallel_size > 1; sequence parallelism "
            "runs packed forwards only (use_remove_padding=true)"
        )
