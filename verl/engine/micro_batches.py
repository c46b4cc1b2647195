"""Splitting a per-rank batch into micro-batches (fixed size or by a token budget).

Outputs computed micro-batch by micro-batch go back to input order with
`verl.utils.seqlen_balancing.restore_order` and the index lists returned here.
"""

from __future__ import annotations

from verl.engine.dist import all_reduce_max
from verl.protocol import DataProto


def split_micro_batches(
    data: DataProto,
    micro_batch_size: int | None,
    use_dynamic_bsz: bool,
    max_token_len: int,
    min_num_micro_batch: int | None = None,
) -> tuple[list[DataProto], list[list[int]] | None]:
    """Split a per-rank batch into micro-batches.

    Fixed mode: consecutive chunks of `micro_batch_size` trajectories (None = one micro-batch).
    Dynamic mode: Karmarkar–Karp balanced groups whose *effective* token count (attention mask
    sum, never the padded width) stays within `max_token_len`. Every
    data-parallel rank runs the same number of micro-batches, because FSDP's collectives pair up.
    Under Ulysses sequence parallelism (an active SP group of ``sp`` ranks) the budget is
    ``max_token_len · sp`` per micro-batch, as verl's: each rank then holds ``max_token_len`` of its tokens.

    Returns:
        (micro_batches, index_lists): the input rows of each micro-batch (dynamic mode), for
        `verl.utils.seqlen_balancing.restore_order`; None in fixed mode (rows keep their order).
    """
    if not use_dynamic_bsz:
        size = micro_batch_size or len(data)
        return data.split(size), None
    from verl.modules.ulysses import active_sp_size
    from verl.utils.seqlen_balancing import get_num_micro_batches, rearrange_micro_batches

    max_token_len *= active_sp_size()  # the budget is per device; a micro-batch spans the SP group
    seq_lens = data.batch["attention_mask"].sum(-1)
    count = max(get_num_micro_batches(seq_lens, max_token_len), min_num_micro_batch or 1)
    count = all_reduce_max(count)
    groups = rearrange_micro_batches(seq_lens, max_token_len, min_num_micro_batches=count)
    return [data[list(g)] for g in groups], [list(g) for g in groups]
