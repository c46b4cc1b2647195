"""Replay buffer staleness control: ``drop`` evicts and refills to the batch size, ``wait`` trains everything."""

from __future__ import annotations

import threading
import time

import pytest

from verl.trainer.async_rl.replay_buffer import ReplayBuffer


class _Producer:
    """Submits prompts and finishes them on demand (the rollout's side)."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer, self.seq, self.refills = buffer, 0, []

    def submit(self, version: int, k: int = 1) -> list[str]:
        uids = []
        for _ in range(k):
            uid = f"p{self.seq}"
            self.buffer.submitted(uid, self.seq, version)
            self.seq += 1
            uids.append(uid)
        return uids

    def finish(self, uids: list[str]) -> None:
        for uid in uids:
            self.buffer.put(uid, data=uid, chunk_metrics={})


def test_drop_evicts_stale_groups_and_refills_to_the_batch_size():
    buffer = ReplayBuffer(max_off_policy_threshold=2, max_off_policy_strategy="drop")
    prod = _Producer(buffer)
    fresh: list[str] = []

    def refill(k: int) -> None:  # the trainer submits k fresh prompts at the current version
        prod.refills.append(k)
        uids = prod.submit(version=3, k=k)
        fresh.extend(uids)
        prod.finish(uids)

    buffer.refill = refill
    old = prod.submit(version=0, k=2)  # span at version 3: 4 > 2 -> stale
    ok = prod.submit(version=2, k=2)  # span 2 -> kept
    prod.finish(old + ok)
    groups, metrics = buffer.sample(batch_size=4, version=3)
    assert len(groups) == 4  # the batch keeps its size
    assert [g.uid for g in groups] == ok + fresh  # oldest sampleable first, then the refills
    assert prod.refills == [2] and buffer.evicted_uids == old
    assert metrics["training/off_policy/evicted_samples"] == 2.0
    assert metrics["training/off_policy/evicted_samples_staleness/max"] == 4.0
    assert all(buffer.span(g, 3) <= 2 for g in groups)


def test_wait_trains_every_group_and_waits_for_those_at_the_threshold():
    buffer = ReplayBuffer(max_off_policy_threshold=2, max_off_policy_strategy="wait")
    prod = _Producer(buffer)
    old = prod.submit(version=0, k=2)
    new = prod.submit(version=2, k=2)
    prod.finish(new)  # the stale ones are still in flight
    got: list = []
    worker = threading.Thread(target=lambda: got.append(buffer.sample(batch_size=2, version=3)))
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive()  # 2 groups are sampleable, but in-flight groups have reached the threshold
    prod.finish(old)
    worker.join(5)
    groups, metrics = got[0]
    assert [g.uid for g in groups] == old  # nothing dropped: the oldest are trained first
    assert metrics["training/off_policy/evicted_samples"] == 0.0
    assert [g.uid for g in buffer.sample(batch_size=2, version=3)[0]] == new


def test_threshold_zero_is_on_policy():
    buffer = ReplayBuffer(max_off_policy_threshold=0, max_off_policy_strategy="drop")
    prod = _Producer(buffer)
    buffer.refill = lambda k: prod.finish(prod.submit(version=1, k=k))
    prod.finish(prod.submit(version=0, k=1))
    groups, metrics = buffer.sample(batch_size=1, version=1)
    assert buffer.span(groups[0], 1) == 1 and metrics["training/off_policy/evicted_samples"] == 1.0


def test_a_rollout_error_reaches_the_waiting_trainer():
    buffer = ReplayBuffer(8, "drop")
    threading.Timer(0.1, buffer.fail, args=(RuntimeError("rollout died"),)).start()
    with pytest.raises(RuntimeError, match="rollout died"):
        buffer.sample(batch_size=1, version=0)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="drop or wait"):
        ReplayBuffer(1, "keep")
    with pytest.raises(ValueError, match=">= 0"):
        ReplayBuffer(-1, "drop")


def test_a_custom_sampler_is_built_with_the_buffer_arguments_and_its_kwargs(tmp_path):
    from types import SimpleNamespace

    from verl.trainer.async_rl.loop import build_replay_buffer

    path = tmp_path / "my_sampler.py"
    path.write_text(
        "from verl.trainer.async_rl.replay_buffer import ReplayBuffer\n"
        "class NewestFirst(ReplayBuffer):\n"
        "    def __init__(self, *, tag, **kw):\n"
        "        super().__init__(**kw)\n"
        "        self.tag = tag\n"
        "    def _pick(self, batch_size, version):\n"
        "        if len(self._finished) < batch_size:\n"
        "            return None\n"
        "        order = sorted(self._finished.values(), key=lambda g: -g.seq)[:batch_size]\n"
        "        for g in order:\n"
        "            del self._finished[g.uid]\n"
        "        return order\n"
    )
    cfg = SimpleNamespace(
        max_off_policy_threshold=4,
        max_off_policy_strategy="wait",
        sampler_kwargs={"tag": "x"},
        custom_sampler=SimpleNamespace(path=str(path), name="NewestFirst"),
    )
    buffer = build_replay_buffer(cfg, refill=None)
    assert type(buffer).__name__ == "NewestFirst" and buffer.tag == "x" and buffer.threshold == 4
    prod = _Producer(buffer)
    prod.finish(prod.submit(version=0, k=3))
    assert [g.uid for g in buffer.sample(batch_size=2, version=0)[0]] == ["p2", "p1"]
