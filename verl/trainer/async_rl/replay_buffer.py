"""Replay buffer of prompt groups between the rollout thread and the trainer (``separate_async``).

A *group* is the ``rollout.n`` trajectories of one prompt. The trainer registers a prompt when it
submits it (`submitted`); the rollout thread adds the group once every trajectory is generated
and scored (`put`): only then is it sampleable. `sample` hands out the oldest sampleable groups
first (by submission version, then submission order) and applies verl's staleness control
(``trainer.v1.sampler``; verl ``verl/trainer/ppo/v1/replay_buffer.py``, ``ReplayBufferAsync``):

* span of a group = ``current version - version at submission + 1`` (1 = submitted and trained
  under the same weights); a threshold of 0 is read as 1.
* ``drop``: a finished group whose span exceeds the threshold is evicted; ``refill(k)`` submits
  ``k`` fresh prompts in its place, so every sampled batch keeps its size. Metrics
  ``training/off_policy/evicted_samples`` and ``.../evicted_samples_staleness/{mean,max,min}``.
* ``wait``: nothing is evicted; sampling waits while an in-flight group has reached the
  threshold (it finishes and is trained), so every submitted prompt is trained.

Thread-safe: one condition variable guards the state; `fail` wakes a waiting trainer with the
rollout thread's error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Group", "ReplayBuffer"]


@dataclass
class Group:
    """One prompt's scored trajectories.

    Attributes:
        uid: the prompt's id (``uid`` of its rows).
        seq: submission order (unique, increasing).
        submit_version: trainer version when the prompt was submitted.
        data: the group's ``rollout.n`` rows (a `DataProto`), scored.
        chunk_metrics: metrics of the generation call that produced it (shared by its chunk).
    """

    uid: str
    seq: int
    submit_version: int
    data: Any = None
    chunk_metrics: dict[str, float] = field(default_factory=dict)


class ReplayBuffer:
    """Groups in flight and finished; see the module docstring.

    Args:
        max_off_policy_threshold: most versions a group may span (0 = 1).
        max_off_policy_strategy: ``drop`` or ``wait``.
        refill: ``refill(k)`` submits ``k`` fresh prompts (called by `sample`, outside the lock).

    Raises:
        ValueError: an unknown strategy or a negative threshold.
    """

    def __init__(
        self,
        max_off_policy_threshold: int,
        max_off_policy_strategy: str,
        refill: Callable[[int], None] | None = None,
        poll_s: float = 0.05,
    ) -> None:
        if max_off_policy_strategy not in ("drop", "wait"):
            raise ValueError(f"max_off_policy_strategy must be drop or wait, got {max_off_policy_strategy!r}")
        if max_off_policy_threshold < 0:
            raise ValueError(f"max_off_policy_threshold must be >= 0, got {max_off_policy_threshold}")
        self.threshold = max(1, int(max_off_policy_threshold))
        self.strategy = max_off_policy_strategy
        self.refill = refill
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._inflight: dict[str, Group] = {}
        self._finished: dict[str, Group] = {}
        self._error: BaseException | None = None
        self.wait_s = 0.0  # seconds `sample` spent waiting (the trainer's idle time)
        self.evicted_uids: list[str] = []  # every prompt dropped as stale, in eviction order

    # ------------------------------------------------------------------ producer side
    def submitted(self, uid: str, seq: int, version: int) -> None:
        """Register a prompt handed to the rollout (in flight until `put`)."""
        with self._cond:
            self._inflight[uid] = Group(uid, seq, version)

    def put(self, uid: str, data: Any, chunk_metrics: dict[str, float]) -> None:
        """The prompt's group is generated and scored: it becomes sampleable.

        Raises:
            KeyError: ``uid`` was never submitted (or was already put).
        """
        with self._cond:
            group = self._inflight.pop(uid)
            group.data, group.chunk_metrics = data, chunk_metrics
            self._finished[uid] = group
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """The producer died: every current and future `sample` raises ``error``."""
        with self._cond:
            self._error = error
            self._cond.notify_all()

    # ------------------------------------------------------------------ consumer side
    def span(self, group: Group, version: int) -> int:
        """verl's span of ``group`` at trainer version ``version``."""
        return version - group.submit_version + 1

    def sample(self, batch_size: int, version: int) -> tuple[list[Group], dict[str, float]]:
        """Wait for ``batch_size`` sampleable groups and take the oldest.

        Args:
            batch_size: groups to return.
            version: the trainer's current version (for spans).

        Returns:
            (the groups in sampling order, eviction metrics of this call).

        Raises:
            The producer's error (see `fail`).
        """
        evicted: list[int] = []
        start = time.perf_counter()
        try:
            while True:
                with self._cond:
                    if self._error is not None:
                        raise self._error
                    stale = self._evict_stale(version)
                    if not stale:
                        picked = self._pick(batch_size, version)
                        if picked is not None:
                            return picked, _eviction_metrics(evicted)
                        self._cond.wait(self.poll_s)
                        continue
                evicted.extend(stale)
                if self.refill is not None:
                    self.refill(len(stale))
        finally:
            self.wait_s += time.perf_counter() - start

    def _evict_stale(self, version: int) -> list[int]:
        if self.strategy != "drop":
            return []
        stale = [uid for uid, g in self._finished.items() if self.span(g, version) > self.threshold]
        spans = [self.span(self._finished.pop(uid), version) for uid in stale]
        self.evicted_uids.extend(stale)
        return spans

    def _pick(self, batch_size: int, version: int) -> list[Group] | None:
        if self.strategy == "wait" and any(self.span(g, version) >= self.threshold for g in self._inflight.values()):
            return None  # dropless: let the in-flight groups at the threshold finish first
        if len(self._finished) < batch_size:
            return None
        order = sorted(self._finished.values(), key=lambda g: (g.submit_version, g.seq))[:batch_size]
        for g in order:
            del self._finished[g.uid]
        return order

    # ------------------------------------------------------------------ bookkeeping
    def counts(self) -> tuple[int, int]:
        """(groups in flight, groups sampleable)."""
        with self._cond:
            return len(self._inflight), len(self._finished)


def _eviction_metrics(spans: list[int]) -> dict[str, float]:
    if not spans:
        return {"training/off_policy/evicted_samples": 0.0}
    return {
        "training/off_policy/evicted_samples": float(len(spans)),
        "training/off_policy/evicted_samples_staleness/mean": sum(spans) / len(spans),
        "training/off_policy/evicted_samples_staleness/max": float(max(spans)),
        "training/off_policy/evicted_samples_staleness/min": float(min(spans)),
    }
