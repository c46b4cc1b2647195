"""`verl.workers.weight_stream.WeightStream`: bucket cutting and in-place loading (hand-checked sizes)."""

from __future__ import annotations

import pytest
import torch

from verl.workers.rollout.weight_sync import load_bucket_in_place, plan_state_buckets, stream_names
from verl.workers.weight_stream import WeightStream


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    # 100x10 = 4000 B, 10 = 40 B, 10x30 = 1200 B, 30 = 120 B, buffer 8 = 32 B (fp32)
    m = torch.nn.Sequential(torch.nn.Linear(100, 10), torch.nn.Linear(10, 30))
    m.register_buffer("table", torch.arange(8.0))
    m[1].weight.requires_grad_(False)
    return m


def _all_buckets(m, trainable_only, bucket_bytes, keep=True):
    stream = WeightStream.start(m, trainable_only, bucket_bytes)
    buckets = [stream.next(m, keep=keep) for _ in range(stream.buckets)]
    with pytest.raises(RuntimeError, match=f"all {stream.buckets} buckets were sent"):
        stream.next(m, keep=keep)
    return buckets


def test_buckets_follow_the_size_limit_and_cover_the_state_once():
    m = _model()
    names = stream_names(m, trainable_only=False)
    assert names == ["table", "0.weight", "0.bias", "1.weight", "1.bias"]
    buckets = _all_buckets(m, False, 1300)
    # table (32) alone would fit with 0.weight? no: 32 + 4000 > 1300 -> cut; 0.weight (4000 > limit) alone;
    # 0.bias 40 + 1.weight 1200 = 1240 <= 1300; 1.bias 120 would make 1360 -> cut
    assert [[n for n, _ in b] for b in buckets] == [["table"], ["0.weight"], ["0.bias", "1.weight"], ["1.bias"]]
    assert plan_state_buckets(m, names, 1300).bounds == ((0, 1), (1, 2), (2, 4), (4, 5))
    assert plan_state_buckets(m, [], 1300).bounds == ()
    state = m.state_dict()
    assert all(torch.equal(t, state[n]) for b in buckets for n, t in b)


def test_trainable_only_skips_frozen_parameters_and_buffers_and_other_ranks_keep_nothing():
    m = _model()
    names = stream_names(m, trainable_only=True)
    assert names == ["0.weight", "0.bias", "1.bias"]
    assert _all_buckets(m, True, 10**6, keep=False) == [[]]  # one pass, nothing kept off rank 0


def test_load_in_place_copies_by_name_and_rejects_unknown_names():
    src, dst = _model(), _model()
    with torch.no_grad():
        src[0].weight.add_(1.0)
    ptr = dst[0].weight.data_ptr()
    for bucket in _all_buckets(src, False, 2048):
        load_bucket_in_place(dst, bucket)
    assert dst[0].weight.data_ptr() == ptr and torch.equal(dst[0].weight, src[0].weight)
    with pytest.raises(KeyError, match="no tensor named 'nope'"):
        load_bucket_in_place(dst, [("nope", torch.zeros(1))])
    with pytest.raises(ValueError, match="bucket_bytes must be > 0"):
        WeightStream.start(src, False, 0)
