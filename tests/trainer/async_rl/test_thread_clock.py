"""`ThreadClock`: per-thread CPU seconds and run-queue share from Linux ``schedstat``."""

from __future__ import annotations

import threading
import time

import pytest

from verl.trainer.async_rl.thread_clock import ThreadClock, thread_times

pytestmark = pytest.mark.skipif(
    thread_times(threading.get_native_id()) is None, reason="the kernel reports no per-thread schedstat here"
)


def _spin(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_a_spinning_thread_is_charged_its_cpu_time_and_a_sleeping_one_none():
    go, done = threading.Event(), threading.Event()

    def work() -> None:
        go.wait()
        _spin(0.2)
        done.set()
        time.sleep(0.3)

    thread = threading.Thread(target=work)
    thread.start()
    clock = ThreadClock("worker", thread)
    go.set()
    done.wait()
    busy = clock.take()
    assert set(busy) == {"worker/cpu_s", "worker/runq_ratio"}
    assert 0.19 <= busy["worker/cpu_s"] < 5.0
    assert 0.0 <= busy["worker/runq_ratio"] <= 1.0
    time.sleep(0.1)  # the thread sleeps: no CPU, never runnable
    idle = clock.take()
    assert idle["worker/cpu_s"] < 0.05
    thread.join()
    # an ended thread reports nothing once the kernel has removed it (join may return just before)
    assert clock.take().get("worker/cpu_s", 0.0) < 0.05


def test_the_calling_thread_is_the_default():
    clock = ThreadClock("trainer")
    assert clock.native_id == threading.get_native_id()
    _spin(0.05)
    assert clock.take()["trainer/cpu_s"] >= 0.045
