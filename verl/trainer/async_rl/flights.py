"""Prompt groups in flight on one pool (``colocate_async``): their state and the loop's decisions.

A *flight* is one prompt's ``rollout.n`` trajectories from submission to training. Its ``gen``
is what the next generation call receives: the fresh generation rows, then, once a call has
run, the engine's output rows (a partial output continues each unfinished row from its prefix,
`verl.workers.rollout.partial.split_continuation`). The decisions are pure functions of the
flights, so they are tested on hand-built ones:

* span of a flight at version ``v`` = ``v - submit_version + 1`` (verl's, as `ReplayBuffer.span`);
  the threshold ``trainer.v1.sampler.max_off_policy_threshold`` (0 read as 1) bounds it;
* `stale`: ``drop`` evicts every flight over the threshold, finished or not (on one pool the
  time spent generating a group that can never be trained is the trainer's own time);
* `ready`: ``batch_size`` finished flights exist and, with ``wait``, no unfinished flight has
  reached the threshold (it must finish and be trained first);
* `pick`: the oldest finished flights (submission version, then order);
* `call_plan`: the order of the generation calls of a step: started flights first, one call per
  submission version (oldest first: the carried long tail), then every fresh flight in one call;
* `CutWatch`: counts finished rows while a call decodes and says when `ready` holds: the
  long-tail cut (the call is interrupted; unfinished rows keep their prefix).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CutWatch", "Flight", "call_plan", "pick", "ready", "span", "stale"]


@dataclass
class Flight:
    """One prompt group between submission and training.

    Attributes:
        uid: the prompt's id.
        seq: submission order (unique, increasing).
        submit_version: trainer version (``global_step``) when it was submitted.
        row: the prompt's `verl.trainer.async_rl.feed.Row` (saved with checkpoints).
        prompt: its one-row prompt batch (non-tensor fields; the prompt tensors are in ``gen``).
        gen: its ``n`` generation rows: fresh (``input_ids`` ...) or an engine output.
        started: a generation call has run on it (``gen`` is an engine output).
        data: the scored group (prompt fields and output, ``n`` rows) once every row finished.
        chunk_metrics: generation and reward metrics of the call that finished it.
        streamed: futures of the streamed scores of its finished rows (``reward_model.streaming``;
            each `verl.reward.streaming.ScoredItem` names rows ``0..n-1`` of the group).
        streamed_rows: the group rows those futures cover.
    """

    uid: str
    seq: int
    submit_version: int
    row: Any = None
    prompt: Any = None
    gen: Any = None
    started: bool = False
    data: Any = None
    chunk_metrics: dict[str, float] = field(default_factory=dict)
    streamed: list[Any] = field(default_factory=list)
    streamed_rows: set[int] = field(default_factory=set)

    @property
    def finished(self) -> bool:
        """Every trajectory generated and the group scored."""
        return self.data is not None

    def unfinished_rows(self) -> int:
        """Rows still to generate (``n`` before any call)."""
        if not self.started:
            return len(self.gen)
        return int((~self.gen.batch["rollout_finished"].bool()).sum())


def span(flight: Flight, version: int) -> int:
    """verl's span of ``flight`` at trainer version ``version`` (1 = submitted at ``version``)."""
    return version - flight.submit_version + 1


def stale(flights: list[Flight], version: int, threshold: int, strategy: str) -> list[Flight]:
    """The flights ``drop`` evicts at ``version`` (none with ``wait``)."""
    if strategy != "drop":
        return []
    limit = max(1, int(threshold))
    return [f for f in flights if span(f, version) > limit]


def ready(flights: list[Flight], version: int, batch_size: int, threshold: int, strategy: str) -> bool:
    """Whether a training batch of ``batch_size`` groups can be taken now (see the module docstring)."""
    if sum(f.finished for f in flights) < batch_size:
        return False
    if strategy == "wait":
        limit = max(1, int(threshold))
        return not any(not f.finished and span(f, version) >= limit for f in flights)
    return True


def pick(flights: list[Flight], batch_size: int) -> list[Flight]:
    """The ``batch_size`` oldest finished flights, in sampling order.

    Raises:
        ValueError: fewer than ``batch_size`` are finished.
    """
    done = sorted((f for f in flights if f.finished), key=lambda f: (f.submit_version, f.seq))
    if len(done) < batch_size:
        raise ValueError(f"{len(done)} finished prompt groups, {batch_size} needed")
    return done[:batch_size]


def call_plan(flights: list[Flight]) -> list[list[Flight]]:
    """Generation calls of a step, in order: started unfinished flights by submission version
    (oldest first), then all fresh ones; flights in submission order within a call."""
    todo = sorted((f for f in flights if not f.finished), key=lambda f: (f.submit_version, f.seq))
    versions = sorted({f.submit_version for f in todo if f.started})
    calls = [[f for f in todo if f.started and f.submit_version == v] for v in versions]
    fresh = [f for f in todo if not f.started]
    return [c for c in [*calls, fresh] if c]


class CutWatch:
    """Finish counter of one generation call: calls ``cut()`` once `ready` would hold.

    Args:
        flights: the call's flights, ``n`` consecutive rows each, in call order.
        n: rows per flight.
        finished_before: flights finished before the call (all of the step's flights).
        needed: the training batch, in groups.
        must_finish: indices (in ``flights``) of flights that must finish first (``wait``).
        cut: called once, from the engine's decode loop, when the criterion holds.
    """

    def __init__(
        self,
        flights: list[Flight],
        n: int,
        finished_before: int,
        needed: int,
        must_finish: set[int],
        cut: Callable[[], None],
    ) -> None:
        self.n = n
        self.left = [f.unfinished_rows() for f in flights]
        self.done = finished_before
        self.needed = needed
        self.must = set(must_finish)
        self._cut = cut
        self.fired = False

    def rows_finished(self, rows: list[int], data: Any = None) -> None:
        """The engine's ``on_trajectories_finished(rows, data)`` hook (rows: indices in the call)."""
        for r in rows:
            i = int(r) // self.n
            self.left[i] -= 1
            if self.left[i] == 0:
                self.done += 1
                self.must.discard(i)
        if not self.fired and self.done >= self.needed and not self.must:
            self.fired = True
            self._cut()
