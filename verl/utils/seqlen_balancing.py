"""Sequence-length balancing for dynamic batch size (``use_dynamic_bsz``).

Micro-batches are packed by a token budget (``ppo_max_token_len_per_gpu``) instead of a
fixed sample count. Lengths are always *effective* lengths (``attention_mask.sum(-1)``),
never the padded width of the tensor.

Typical use in a worker (data-parallel ranks must run the same number of micro-batches,
otherwise collective ops hang)::

    seq_lens = data.batch["attention_mask"].sum(-1)                  # (B,)
    n_local = get_num_micro_batches(seq_lens, max_token_len)
    n = all_reduce_max(n_local)                                       # caller's process group
    micro_idx = rearrange_micro_batches(seq_lens, max_token_len, min_num_micro_batches=n)
    outputs = torch.cat([forward(data[idx]) for idx in micro_idx])
    outputs = restore_order(outputs, micro_idx)                       # back to input order

Micro-batches hold different token counts, so token-mean losses must be normalised by the
global token count of the mini-batch, not weighted by sample counts.

Source: Karmarkar & Karp (1982), "The differencing method of set partitioning" (largest
differencing method, k-way form); verl ``verl/utils/seqlen_balancing.py``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import torch

__all__ = [
    "ceildiv",
    "get_num_micro_batches",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "karmarkar_karp",
    "rearrange_micro_batches",
    "restore_order",
]


def ceildiv(a: int, b: int) -> int:
    """Return ceil(a / b) for integers (b > 0)."""
    return -(-a // b)


def _sort_key(part: tuple[int, list[int]]) -> tuple[int, int]:
    # Ties on the sum are broken by item count so that empty partitions are always the
    # smallest: merging then fills them first and no partition stays empty when n >= k.
    return part[0], len(part[1])


def _merge(a: list[tuple[int, list[int]]], b: list[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
    """Pair a's largest partitions with b's smallest (both given as k partitions)."""
    a_desc = sorted(a, key=_sort_key, reverse=True)
    b_asc = sorted(b, key=_sort_key)
    return [(sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a_desc, b_asc, strict=True)]


def _spread(parts: list[tuple[int, list[int]]]) -> int:
    sums = [s for s, _ in parts]
    return max(sums) - min(sums)


def karmarkar_karp(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Partition indices into k sets with balanced sums (largest differencing method).

    Each state is a k-tuple of partial partitions; the two states with the largest spread
    (max sum - min sum) are merged by pairing the largest partitions of one with the
    smallest of the other, until one state remains. The final spread is at most the
    largest item (at most the largest gap inside a sorted k-group when ``equal_size``), so
    ``max(sum) <= sum(seqlen_list) / k + max(seqlen_list)``.

    Args:
        seqlen_list: (n,) non-negative item sizes (effective token counts).
        k_partitions: number of partitions k.
        equal_size: every partition gets exactly n / k items (requires n % k == 0).

    Returns:
        k lists of indices into ``seqlen_list``, each sorted ascending; together a
        permutation of range(n). None is empty when n >= k.
    """
    n = len(seqlen_list)
    order = sorted(range(n), key=lambda i: (seqlen_list[i], i))
    states: list[list[tuple[int, list[int]]]] = []
    if equal_size:
        # Each state takes k consecutive items of the sorted order, one per partition.
        for start in range(0, n, k_partitions):
            group = order[start : start + k_partitions]
            states.append([(seqlen_list[i], [i]) for i in group])
    else:
        for i in order:
            states.append([(seqlen_list[i], [i])] + [(0, []) for _ in range(k_partitions - 1)])
    counter = itertools.count()  # tie-breaker: heapq must never compare the states
    heap = [(-_spread(s), next(counter), s) for s in states]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = _merge(a, b)
        heapq.heappush(heap, (-_spread(merged), next(counter), merged))
    final = heap[0][2] if heap else [(0, []) for _ in range(k_partitions)]
    return [sorted(idx) for _, idx in final]


def get_seqlen_balanced_partitions(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """`karmarkar_karp` with input checks; every returned partition is non-empty.

    Raises:
        ValueError: if k < 1, k > n, a length is negative, or ``equal_size`` and n % k != 0.
    """
    n = len(seqlen_list)
    if k_partitions < 1 or k_partitions > n:
        raise ValueError(f"cannot split {n} sequences into {k_partitions} non-empty partitions")
    if any(length < 0 for length in seqlen_list):
        raise ValueError("sequence lengths must be non-negative")
    if equal_size and n % k_partitions != 0:
        raise ValueError(f"equal_size partitions need n % k == 0, got n={n}, k={k_partitions}")
    # Non-empty by construction: see the tie-break in `_sort_key`.
    return karmarkar_karp(list(map(int, seqlen_list)), k_partitions, equal_size)


def _as_int_list(seq_lens: torch.Tensor | Sequence[int]) -> list[int]:
    if isinstance(seq_lens, torch.Tensor):
        if seq_lens.dim() != 1:
            raise ValueError(f"seq_lens must be 1-D (B,), got shape {tuple(seq_lens.shape)}")
        return [int(x) for x in seq_lens.tolist()]
    return [int(x) for x in seq_lens]


def _check_cap(lens: list[int], max_token_len: int, budget_name: str) -> None:
    if max_token_len <= 0:
        raise ValueError(f"{budget_name} must be positive, got {max_token_len}")
    for i, length in enumerate(lens):
        if length > max_token_len:
            raise ValueError(
                f"sequence of {length} tokens > {budget_name}={max_token_len} (sample {i}); "
                f"raise {budget_name} to at least max_prompt_length + max_response_length"
            )


def _fits(parts: list[list[int]], lens: list[int], cap: int) -> bool:
    return all(sum(lens[i] for i in p) <= cap for p in parts)


def _search(lens: list[int], cap: int, start: int) -> tuple[int, list[list[int]]]:
    """Smallest count >= start whose balanced partition fits the cap (exists at n)."""
    k = max(start, ceildiv(sum(lens), cap), 1)
    while True:
        parts = get_seqlen_balanced_partitions(lens, k, equal_size=False)
        if _fits(parts, lens, cap):
            return k, parts
        k += 1


def get_num_micro_batches(
    seq_lens: torch.Tensor | Sequence[int], max_token_len: int, budget_name: str = "max_token_len"
) -> int:
    """Fewest micro-batches whose balanced partition keeps each one within ``max_token_len``.

    Starts from the lower bound ceil(total / cap) and increases it until a Karmarkar-Karp
    partition fits (the lower bound alone can leave one micro-batch over the cap).

    Args:
        seq_lens: (B,) effective lengths.
        max_token_len: token budget per micro-batch.
        budget_name: config name used in error messages.

    Raises:
        ValueError: if one sequence alone exceeds the budget.
    """
    lens = _as_int_list(seq_lens)
    _check_cap(lens, max_token_len, budget_name)
    return _search(lens, max_token_len, 1)[0] if lens else 0


def _split_to_count(parts: list[list[int]], lens: list[int], k: int) -> list[list[int]]:
    """Split the fullest micro-batches in two until there are k; sums never grow."""
    parts = [list(p) for p in parts]
    while len(parts) < k:
        biggest = max(range(len(parts)), key=lambda j: (len(parts[j]), sum(lens[i] for i in parts[j])))
        items = parts.pop(biggest)
        halves = get_seqlen_balanced_partitions([lens[i] for i in items], 2, equal_size=False)
        parts.extend([[items[i] for i in half] for half in halves])
    return parts


def rearrange_micro_batches(
    seq_lens: torch.Tensor | Sequence[int],
    max_token_len: int,
    min_num_micro_batches: int | None = None,
    budget_name: str = "max_token_len",
) -> list[list[int]]:
    """Group sample indices into token-balanced micro-batches within a token budget.

    Guarantees: every micro-batch is non-empty and holds at most ``max_token_len``
    effective tokens; the count is exactly ``max(get_num_micro_batches(...),
    min_num_micro_batches)``, so ranks that pass the all-reduced maximum run the same
    count; the lists together are a permutation of range(B).

    Args:
        seq_lens: (B,) effective lengths (``attention_mask.sum(-1)``), never padded widths.
        max_token_len: token budget per micro-batch (e.g. ``ppo_max_token_len_per_gpu``).
        min_num_micro_batches: force at least this many micro-batches (the max over DP ranks).
        budget_name: config name used in error messages.

    Returns:
        Index lists, one per micro-batch, each sorted ascending, ordered by first index.

    Raises:
        ValueError: if one sequence exceeds the budget (message names both numbers), or if
            more micro-batches are requested than there are samples. Ranks given equal
            shares by `DataProto.chunk` never hit the latter: a rank needs at most B.
    """
    lens = _as_int_list(seq_lens)
    _check_cap(lens, max_token_len, budget_name)
    n_local, parts = _search(lens, max_token_len, 1) if lens else (0, [])
    k = max(n_local, min_num_micro_batches or 0)
    if k > len(lens):
        raise ValueError(
            f"cannot run {k} non-empty micro-batches with {len(lens)} samples on this rank; "
            "give every data-parallel rank the same number of samples"
        )
    if k > n_local:
        forced = get_seqlen_balanced_partitions(lens, k, equal_size=False)
        # A balanced partition at k usually fits; if not, splitting the fitting partition
        # at n_local always does (sub-batches of a fitting batch fit).
        parts = forced if _fits(forced, lens, max_token_len) else _split_to_count(parts, lens, k)
    return sorted((sorted(p) for p in parts), key=lambda p: p[0])


def get_reverse_idx(idx_map: Sequence[int]) -> list[int]:
    """Inverse permutation: ``reverse[idx_map[i]] = i``."""
    reverse = [0] * len(idx_map)
    for position, original in enumerate(idx_map):
        reverse[original] = position
    return reverse


def restore_order(outputs: torch.Tensor, index_lists: Sequence[Sequence[int]]) -> torch.Tensor:
    """Put outputs computed micro-batch by micro-batch back in the original sample order.

    Args:
        outputs: (B, ...) the concatenation of the micro-batch outputs, in the order of
            ``index_lists``.
        index_lists: the lists returned by `rearrange_micro_batches`.

    Returns:
        (B, ...) outputs where row i belongs to original sample i.
    """
    flat = [i for idx in index_lists for i in idx]
    if len(flat) != outputs.shape[0]:
        raise ValueError(f"{outputs.shape[0]} output rows for {len(flat)} indices")
    return outputs[torch.tensor(get_reverse_idx(flat), dtype=torch.long, device=outputs.device)]
