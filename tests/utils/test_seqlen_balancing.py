"""Sequence-length balancing: Karmarkar-Karp partitions and dynamic micro-batches (B35)."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import verl.utils.seqlen_balancing as sb
from verl.utils.seqlen_balancing import (
    ceildiv,
    get_num_micro_batches,
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    karmarkar_karp,
    rearrange_micro_batches,
    restore_order,
)


def sums(parts: list[list[int]], lens: list[int]) -> list[int]:
    return [sum(lens[i] for i in p) for p in parts]


def test_ceildiv():
    assert [ceildiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_karmarkar_karp_hand_computed():
    # Differencing: (8)-(7) -> {8|7}, (6)-(5) -> {6|5}, (4) with {8|7} -> {4+7|8},
    # then {11|8} with {6|5}: 11+5, 8+6 -> {4,7,5}=16 | {8,6}=14.
    lens = [8, 7, 6, 5, 4]
    parts = karmarkar_karp(lens, 2, equal_size=False)
    assert parts == [[1, 3, 4], [0, 2]]
    assert sums(parts, lens) == [16, 14]


def test_karmarkar_karp_equal_size_exact_balance():
    # Sorted groups of 2 have spread 1, so the final spread is <= 1; total 36 is even -> 18 | 18.
    lens = [1, 2, 3, 4, 5, 6, 7, 8]
    parts = karmarkar_karp(lens, 2, equal_size=True)
    assert [len(p) for p in parts] == [4, 4]
    assert sums(parts, lens) == [18, 18]


def test_all_zero_lengths_still_fill_every_partition():
    parts = get_seqlen_balanced_partitions([0, 0, 0, 0], 3, equal_size=False)
    assert all(parts) and sorted(i for p in parts for i in p) == [0, 1, 2, 3]


def test_balanced_partitions_validate_inputs():
    with pytest.raises(ValueError, match="cannot split 2 sequences into 3 non-empty"):
        get_seqlen_balanced_partitions([1, 2], 3, equal_size=False)
    with pytest.raises(ValueError, match="n % k == 0, got n=5, k=2"):
        get_seqlen_balanced_partitions([1, 2, 3, 4, 5], 2, equal_size=True)
    with pytest.raises(ValueError, match="non-negative"):
        get_seqlen_balanced_partitions([1, -2], 1, equal_size=False)


@settings(max_examples=150, deadline=None)
@given(
    lens=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=40),
    k=st.integers(min_value=1, max_value=8),
    equal_size=st.booleans(),
)
def test_karmarkar_karp_properties(lens: list[int], k: int, equal_size: bool):
    k = min(k, len(lens))
    if equal_size:
        lens = lens[: len(lens) - len(lens) % k]
    parts = get_seqlen_balanced_partitions(lens, k, equal_size)
    assert len(parts) == k and all(parts)
    assert sorted(i for p in parts for i in p) == list(range(len(lens)))
    s = sums(parts, lens)
    # Greedy list-scheduling bound; differencing keeps the spread <= the largest item.
    assert max(s) <= sum(lens) / k + max(lens)
    assert max(s) - min(s) <= max(lens)
    if equal_size:
        assert {len(p) for p in parts} == {len(lens) // k}


def test_b35a_effective_lengths_not_padded_width():
    """B35 (a): 8 samples of effective length 7 padded to width 16, cap 8 -> 8 singletons."""
    attention_mask = torch.zeros(8, 16, dtype=torch.long)
    attention_mask[:, 9:] = 1  # left padding: 7 real tokens at the end of each row
    seq_lens = attention_mask.sum(-1)
    assert seq_lens.tolist() == [7] * 8
    micro = rearrange_micro_batches(seq_lens, max_token_len=8, budget_name="ppo_max_token_len_per_gpu")
    assert micro == [[0], [1], [2], [3], [4], [5], [6], [7]]
    assert get_num_micro_batches(seq_lens, 8) == 8
    # outputs computed in micro-batch order come back in input order
    shuffled = [[3], [0], [7], [1], [6], [2], [5], [4]]
    outputs = torch.cat([10.0 * torch.tensor(idx, dtype=torch.float32) for idx in shuffled])
    assert restore_order(outputs, shuffled).tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]


def test_b35a_lower_bound_is_not_enough():
    """B35 (a): ceil(15 / 8) = 2 micro-batches cannot hold [5, 5, 5]; 3 are used, each <= 8."""
    lens = [5, 5, 5]
    micro = rearrange_micro_batches(lens, 8)
    assert micro == [[0], [1], [2]]
    # ceil(15 / 10) = 2 fits: {0}-{1} differ by 0 -> {5|5}; merging {5|0} of item 2 pairs it with {0}.
    assert rearrange_micro_batches(lens, 10) == [[0, 2], [1]]


def test_b35b_single_sequence_over_budget_names_both_numbers():
    """B35 (b): one sequence of 9 tokens with a budget of 8 is a configuration error."""
    with pytest.raises(ValueError, match=re.escape("sequence of 9 tokens > ppo_max_token_len_per_gpu=8")):
        rearrange_micro_batches(torch.tensor([3, 9]), 8, budget_name="ppo_max_token_len_per_gpu")
    with pytest.raises(ValueError, match=re.escape("sequence of 9 tokens > max_token_len=8")):
        get_num_micro_batches([9], 8)


def test_b35c_forced_count_across_dp_ranks():
    """B35 (c): rank 0 needs 1 micro-batch, rank 1 needs 3; both run 3, none empty."""
    rank0, rank1 = [2, 2, 2], [8, 8, 8]
    n = max(get_num_micro_batches(rank0, 8), get_num_micro_batches(rank1, 8))
    assert (get_num_micro_batches(rank0, 8), n) == (1, 3)
    assert rearrange_micro_batches(rank0, 8, min_num_micro_batches=n) == [[0], [1], [2]]
    assert rearrange_micro_batches(rank1, 8, min_num_micro_batches=n) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="cannot run 4 non-empty micro-batches with 3 samples"):
        rearrange_micro_batches(rank0, 8, min_num_micro_batches=4)


def test_forced_count_falls_back_to_splitting(monkeypatch: pytest.MonkeyPatch):
    """If the balanced partition at the forced count exceeded the cap, a fitting one is split."""
    lens = [4, 4, 4, 4]  # fits in 2 micro-batches of 8
    real = sb.get_seqlen_balanced_partitions

    def bad_at_three(seqlen_list, k_partitions, equal_size):
        if k_partitions == 3 and len(seqlen_list) == 4:
            return [[0, 1, 2], [3], []]  # 12 tokens > 8
        return real(seqlen_list, k_partitions, equal_size)

    monkeypatch.setattr(sb, "get_seqlen_balanced_partitions", bad_at_three)
    micro = rearrange_micro_batches(lens, 8, min_num_micro_batches=3)
    assert len(micro) == 3 and all(micro)
    assert all(s <= 8 for s in sums(micro, lens))
    assert sorted(i for p in micro for i in p) == [0, 1, 2, 3]


@settings(max_examples=100, deadline=None)
@given(
    lens=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=30),
    extra_cap=st.integers(min_value=0, max_value=100),
    forced=st.integers(min_value=0, max_value=30),
)
def test_rearrange_properties(lens: list[int], extra_cap: int, forced: int):
    cap = max(lens) + extra_cap
    forced = min(forced, len(lens))
    micro = rearrange_micro_batches(torch.tensor(lens), cap, min_num_micro_batches=forced)
    assert len(micro) == max(get_num_micro_batches(lens, cap), forced)
    assert all(micro) and all(s <= cap for s in sums(micro, lens))
    flat = [i for p in micro for i in p]
    assert sorted(flat) == list(range(len(lens)))
    outputs = torch.tensor([float(lens[i]) for i in flat])
    assert restore_order(outputs, micro).tolist() == [float(x) for x in lens]


def test_get_reverse_idx_and_restore_errors():
    assert get_reverse_idx([2, 0, 1]) == [1, 2, 0]
    with pytest.raises(ValueError, match="3 output rows for 2 indices"):
        restore_order(torch.zeros(3), [[0], [1]])
    assert rearrange_micro_batches([], 8) == []
