"""`TimeoutCaller.call_many`: one thread per batch, a deadline per call, the same outcomes as one call at a time."""

from __future__ import annotations

import threading
import time

from verl.reward.timeout import TimeoutCaller


def _scorer(x: str) -> float:
    if x == "raise":
        raise RuntimeError("broken")
    if x == "hang":
        time.sleep(2.0)
    return float(len(x))


def test_call_many_gives_each_call_its_own_outcome_and_deadline() -> None:
    caller = TimeoutCaller(0.3)
    items = ["a", "raise", "hang", "bbb", "", "hang", "cc"]
    start = time.perf_counter()
    many = caller.call_many(_scorer, [{"x": x} for x in items])
    elapsed = time.perf_counter() - start
    assert [o.status for o in many] == ["ok", "error", "timeout", "ok", "ok", "timeout", "ok"]
    assert [o.value for o in many] == [1.0, None, None, 3.0, 0.0, None, 2.0]
    assert "RuntimeError('broken')" in many[1].error and "0.3 s" in many[2].error
    assert 0.6 <= elapsed < 1.5  # two deadlines of 0.3 s, never the 2 s the hung calls would take
    single = [caller(_scorer, x=x) for x in items]  # the one-call-at-a-time path agrees
    assert [(o.status, o.value) for o in single] == [(o.status, o.value) for o in many]


def test_call_many_stops_waiting_after_consecutive_timeouts() -> None:
    caller = TimeoutCaller(0.2)
    out = caller.call_many(
        _scorer, [{"x": x} for x in ["hang", "hang", "a", "hang", "hang", "hang", "b", "c"]], stop_after_timeouts=3
    )
    assert [o.status for o in out] == [
        "timeout",
        "timeout",
        "ok",
        "timeout",
        "timeout",
        "timeout",
        "timeout",
        "timeout",
    ]
    assert out[-1].error.startswith("skipped") and out[2].value == 1.0


def test_call_many_uses_one_thread_per_batch_and_inline_without_deadline() -> None:
    names: list[str] = []

    def record(x: str) -> str:
        names.append(threading.current_thread().name)
        return x

    out = TimeoutCaller(5.0).call_many(record, [{"x": str(i)} for i in range(50)])
    assert [o.value for o in out] == [str(i) for i in range(50)] and set(names) == {"verl-reward-batch"}
    names.clear()
    out = TimeoutCaller(None).call_many(record, [{"x": "a"}, {"x": "b"}])
    assert [o.value for o in out] == ["a", "b"] and set(names) == {threading.current_thread().name}
