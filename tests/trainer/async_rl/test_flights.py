"""``colocate_async``'s decisions on hand-built flights, and verl's off-policy metrics of a batch
whose long tail was carried across a weight update (versions tagged by hand)."""

from __future__ import annotations

import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.async_rl.flights import CutWatch, Flight, call_plan, pick, ready, span, stale
from verl.trainer.async_rl.off_policy import off_policy_metrics

N = 2  # rows per group


def _flight(
    uid: str, seq: int, version: int, started: bool = False, done_rows: int = 0, finished: bool = False
) -> Flight:
    gen = (
        DataProto.from_dict({"rollout_finished": torch.tensor([i < done_rows for i in range(N)])})
        if started
        else DataProto.from_dict({"input_ids": torch.zeros(N, 3, dtype=torch.long)})
    )
    return Flight(uid, seq, version, gen=gen, started=started, data="scored" if finished else None)


def test_span_and_drop_eviction_count_versions_as_verl():
    old, mid, new = _flight("a", 0, 0), _flight("b", 1, 2), _flight("c", 2, 3, finished=True)
    assert [span(f, 3) for f in (old, mid, new)] == [4, 2, 1]
    assert stale([old, mid, new], 3, threshold=2, strategy="drop") == [old]  # finished or not
    assert stale([old, mid, new], 3, threshold=0, strategy="drop") == [old, mid]  # 0 is read as 1
    assert stale([old, mid, new], 3, threshold=0, strategy="wait") == []


def test_ready_needs_the_batch_and_with_wait_the_groups_at_the_threshold():
    flights = [
        _flight("a", 0, 0, started=True, done_rows=1),
        _flight("b", 1, 1, finished=True),
        _flight("c", 2, 1, finished=True),
    ]
    assert ready(flights, 1, batch_size=2, threshold=8, strategy="drop")
    assert not ready(flights, 1, batch_size=3, threshold=8, strategy="drop")
    # "a" spans 2 versions at version 1: with wait at threshold 2 it must finish first
    assert not ready(flights, 1, batch_size=2, threshold=2, strategy="wait")
    assert ready(flights, 1, batch_size=2, threshold=3, strategy="wait")


def test_pick_takes_the_oldest_finished_groups():
    flights = [
        _flight("x", 5, 1, finished=True),
        _flight("y", 1, 0, started=True),
        _flight("z", 2, 0, finished=True),
        _flight("w", 0, 1, finished=True),
    ]
    assert [f.uid for f in pick(flights, 2)] == ["z", "w"]
    with pytest.raises(ValueError, match="3 finished prompt groups, 4 needed"):
        pick(flights, 4)


def test_call_plan_runs_the_carried_tails_oldest_first_then_the_fresh_prompts():
    flights = [
        _flight("f1", 4, 2),
        _flight("t1", 3, 1, started=True),
        _flight("t0", 1, 0, started=True),
        _flight("f0", 2, 1),
        _flight("done", 0, 0, finished=True),
    ]
    assert [[f.uid for f in call] for call in call_plan(flights)] == [["t0"], ["t1"], ["f0", "f1"]]


def test_cut_watch_fires_once_when_enough_groups_are_complete():
    fired: list[int] = []
    # call of 3 groups (rows 0-1, 2-3, 4-5); group 1 already has row 2 finished; 1 group finished before
    flights = [_flight("a", 0, 0), _flight("b", 1, 0, started=True, done_rows=1), _flight("c", 2, 0)]
    watch = CutWatch(flights, N, finished_before=1, needed=3, must_finish=set(), cut=lambda: fired.append(1))
    watch.rows_finished([3])  # group b complete: 2 groups
    watch.rows_finished([0, 4])
    assert fired == [] and watch.left == [1, 0, 1]
    watch.rows_finished([5])  # group c complete: 3 groups
    assert fired == [1] and watch.fired
    watch.rows_finished([1])
    assert fired == [1]


def test_cut_watch_waits_for_the_groups_that_must_finish():
    fired: list[int] = []
    flights = [_flight("a", 0, 0), _flight("b", 1, 1)]
    watch = CutWatch(flights, N, finished_before=0, needed=1, must_finish={0}, cut=lambda: fired.append(1))
    watch.rows_finished([2, 3])  # b complete, but a has reached the threshold
    assert fired == []
    watch.rows_finished([0, 1])
    assert fired == [1]


def test_a_carried_tail_gives_the_hand_counted_spans_and_staleness():
    # trained at version 2; R = 5 response columns, -1 = not sampled
    versions = torch.tensor(
        [
            [2, 2, 2, -1, -1],  # fresh at step 2: span 1, staleness 0, worst 0
            [1, 1, 2, 2, 2],  # cut at step 1, resumed at step 2: span 2, staleness 0, worst 1
            [0, 0, 1, 1, 2],  # carried twice: span 3, staleness 0, worst 2
            [1, 1, 1, 1, -1],  # finished at step 1, trained one step later: span 1, staleness 1, worst 1
        ]
    )
    mask = (versions >= 0).long()
    m = off_policy_metrics(versions, mask, trained_version=2)
    p = "training/off_policy/"
    assert (m[p + "trajectory_spans/mean"], m[p + "trajectory_spans/max"], m[p + "trajectory_spans/min"]) == (
        7 / 4,
        3.0,
        1.0,
    )
    assert (
        m[p + "trajectory_staleness/mean"],
        m[p + "trajectory_staleness/max"],
        m[p + "trajectory_staleness/min"],
    ) == (1 / 4, 1.0, 0.0)
    assert (
        m[p + "trajectory_staleness_worst/mean"],
        m[p + "trajectory_staleness_worst/max"],
        m[p + "trajectory_staleness_worst/min"],
    ) == (1.0, 2.0, 0.0)
