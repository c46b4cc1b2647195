"""Partial rollouts: pausing in-flight generation at a weight update, and resuming from a prefix.

Asynchronous RL loads new weights into the rollout engine while trajectories are still being
generated. Instead of throwing those trajectories away, generation stops at a decode-step
boundary (no forward running), the weights load, and each trajectory continues from its prefix:
the KV cache of prompt + prefix is rebuilt by one prefill under the new weights (the old cache
holds keys and values of the old weights). One trajectory may thus span several policy versions;
every sampled token records the version whose logits sampled it (``rollout_policy_versions``).
verl's fully asynchronous trainer does the same with vLLM's abort / resume
(verl/experimental/fully_async_policy, ``async_training.partial_rollout``).

Two ways, both thread-safe (the trainer calls them from another thread than the generating one):

- pause in place: `PartialRollout.pause` blocks until every decode loop is parked at a step
  boundary; weights load; `PartialRollout.resume` lets each loop rebuild its cache and go on. The
  generation call returns finished trajectories only. Works under the agent loops too.
- interrupt and resubmit: `PartialRollout.interrupt` makes the generation calls return at the next
  boundary with the unfinished rows flagged (``rollout_finished`` False); passing that output back
  to ``generate_sequences`` continues each unfinished row from its prefix (`split_continuation`).

Sampling with per-row ``sample_seeds`` stays reproducible across pauses: the t-th response token of
a row always uses that row's t-th uniform (`verl.workers.rollout.sampling.row_uniforms`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = [
    "NOT_SAMPLED",
    "Carried",
    "PartialRollout",
    "RolloutGate",
    "group_rows",
    "merge_continuation",
    "split_continuation",
    "version_bounds",
]

NOT_SAMPLED = -1
"""``rollout_policy_versions`` of a token no policy sampled: padding, tool and user tokens."""


class RolloutGate:
    """Pause / resume / interrupt of decode loops at decode-step boundaries (a condition variable).

    A decode loop runs inside `decoding` and calls `boundary` between two steps; the trainer
    calls `pause`, `resume`, `interrupt` and `clear_interrupt` from any thread.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._interrupted = False
        self._active = 0  # decode loops inside `decoding`
        self._parked = 0  # of those, loops waiting at a boundary

    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        """Register one decode loop; a loop does not start (prefill) while the gate is paused."""
        with self._cond:
            self._cond.wait_for(lambda: not self._paused or self._interrupted)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def boundary(self) -> bool:
        """Called by a decode loop between steps: waits while paused; False = stop (interrupted)."""
        with self._cond:
            if self._paused and not self._interrupted:
                self._parked += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._paused or self._interrupted)
                self._parked -= 1
            return not self._interrupted

    def pause(self, timeout: float | None = None) -> None:
        """Stop every decode loop at its next step boundary; returns once all are parked.

        Raises:
            TimeoutError: the loops did not all reach a boundary within ``timeout`` seconds (the
                gate is resumed again before raising).
        """
        with self._cond:
            self._paused = True
            if not self._cond.wait_for(lambda: self._parked == self._active, timeout):
                self._paused = False
                self._cond.notify_all()
                raise TimeoutError(f"rollout did not reach a decode-step boundary within {timeout} s")

    def resume(self) -> None:
        """Let parked decode loops continue."""
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def interrupt(self) -> None:
        """Make every decode loop (running, parked, or started later) stop at its next boundary."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def clear_interrupt(self) -> None:
        """Let new generation calls run again after `interrupt`."""
        with self._cond:
            self._interrupted = False

    @property
    def paused(self) -> bool:
        """True between `pause` and `resume`."""
        return self._paused

    @property
    def interrupted(self) -> bool:
        """True between `interrupt` and `clear_interrupt`."""
        return self._interrupted

    def running(self) -> int:
        """Number of decode loops in progress (parked ones included)."""
        with self._cond:
            return self._active

    def idle_or_parked(self) -> bool:
        """True when no forward can be running: no decode loop, or all of them parked."""
        with self._cond:
            return self._parked == self._active


class PartialRollout:
    """The pause / resume / interrupt / version API of an engine (mixed into `HFRollout`).

    The engine sets ``self._gate = RolloutGate()``, ``self.policy_version = 0`` and
    ``self.weights_epoch = 0`` (bumped by every weight load, also an in-place one announced by
    `set_policy_version`).
    """

    _gate: RolloutGate
    policy_version: int
    weights_epoch: int

    def pause(self, timeout: float | None = None) -> None:
        """Park in-flight generation at a decode-step boundary (see `RolloutGate.pause`)."""
        self._gate.pause(timeout)

    def resume(self) -> None:
        """Continue paused generation; loops whose weights changed rebuild their KV cache first."""
        self._gate.resume()

    @contextlib.contextmanager
    def paused(self, timeout: float | None = None) -> Iterator[None]:
        """``with engine.paused(): load weights`` = `pause`, then `resume` on exit (also on error)."""
        self.pause(timeout)
        try:
            yield
        finally:
            self.resume()

    def interrupt(self) -> None:
        """Make generation calls return at the next boundary with unfinished rows flagged."""
        self._gate.interrupt()

    def clear_interrupt(self) -> None:
        """Allow generation again after `interrupt`."""
        self._gate.clear_interrupt()

    def set_policy_version(self, version: int) -> None:
        """The version of the weights now loaded (after an in-place bucketed sync).

        Raises:
            RuntimeError: a decode loop is running and not paused (it would mix two versions
                within a forward).
        """
        self._check_can_load()
        self.policy_version = int(version)
        self.weights_epoch += 1

    def _check_can_load(self) -> None:
        if not self._gate.idle_or_parked():
            raise RuntimeError("weights can only change while no generation runs: call engine.pause() first")


@dataclass
class Carried:
    """What a batch brings into generation, per row (all zeros / -1 for a fresh batch).

    Attributes:
        responses: `(B, R)` response ids so far (pad after ``lengths``).
        log_probs: `(B, R)` float32 sampling log-probs (0 after ``lengths``).
        versions: `(B, R)` int64 policy versions (`NOT_SAMPLED` after ``lengths``).
        lengths: `(B,)` tokens generated so far.
        finished: `(B,)` bool, rows that need no more tokens.
    """

    responses: torch.Tensor
    log_probs: torch.Tensor
    versions: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor


def split_continuation(
    batch: DataProto, response_length: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, Carried]:
    """The prompt part and the carried response part of a prompt batch or of a partial output.

    A batch is a continuation when it holds ``rollout_finished`` and ``responses`` (an engine
    output, possibly interrupted): its prompt is ``prompts`` `(B, P)` with the first P columns of
    ``attention_mask`` / ``position_ids``; row i's prefix is its first ``response_mask[i].sum()``
    response tokens. Otherwise ``input_ids`` is the prompt and nothing is carried.

    Returns:
        (prompt ids `(B, P)`, prompt attention mask `(B, P)`, prompt position ids `(B, P)` or None
        when the batch has none, `Carried`).

    Raises:
        ValueError: a continuation whose response width is not ``response_length``.
    """
    b = batch.batch
    n = len(batch)
    if "rollout_finished" in b.keys() and "responses" in b.keys():
        width = b["prompts"].shape[1]
        if b["responses"].shape[1] != response_length:
            raise ValueError(
                f"a partial rollout of {b['responses'].shape[1]} response columns cannot continue "
                f"with response_length {response_length}"
            )
        lengths = b["response_mask"].long().sum(dim=1)
        versions = (
            b["rollout_policy_versions"].clone()
            if "rollout_policy_versions" in b.keys()
            else torch.where(b["response_mask"].bool(), 0, NOT_SAMPLED).long()
        )
        log_probs = (
            b["rollout_log_probs"].float().clone()
            if "rollout_log_probs" in b.keys()
            else torch.zeros(n, response_length)
        )
        finished = b["rollout_finished"].bool() | (lengths >= response_length)
        carried = Carried(b["responses"].long().clone(), log_probs, versions, lengths, finished)
        pos = b["position_ids"][:, :width] if "position_ids" in b.keys() else None
        return b["prompts"], b["attention_mask"][:, :width], pos, carried
    carried = Carried(
        responses=torch.full((n, response_length), pad_id, dtype=torch.long),
        log_probs=torch.zeros(n, response_length, dtype=torch.float32),
        versions=torch.full((n, response_length), NOT_SAMPLED, dtype=torch.long),
        lengths=torch.zeros(n, dtype=torch.long),
        finished=torch.zeros(n, dtype=torch.bool),
    )
    pos = b["position_ids"] if "position_ids" in b.keys() else None
    return b["input_ids"], b["attention_mask"], pos, carried


def group_rows(lengths: torch.Tensor, finished: torch.Tensor, chunk: int) -> list[torch.Tensor]:
    """Indices of the unfinished rows, grouped by prefix length (ascending), in chunks of at most
    ``chunk`` rows, each chunk in row order (a fresh batch: ``0..B-1`` in chunks, as before)."""
    groups = []
    todo = (~finished).nonzero().flatten()
    for length in torch.unique(lengths[todo]).tolist():
        rows = todo[lengths[todo] == length]
        groups += list(torch.split(rows, max(int(chunk), 1)))
    return groups


def merge_continuation(
    carried: Carried,
    rows: list[int],
    responses: torch.Tensor,
    lengths: torch.Tensor,
    log_probs: torch.Tensor,
    versions: list[list[int]],
    finished: list[bool],
) -> None:
    """Append new tokens after each row's prefix, in place (engines that resubmit the prefix as
    prompt tokens: vLLM).

    Args:
        carried: the batch's state (`split_continuation`); row ``rows[j]`` grows.
        rows: the rows generated, in the order of the other arguments.
        responses: `(k, W)` new ids (pad after ``lengths``), W >= every new length.
        lengths: `(k,)` new tokens per row (at most R minus the row's prefix).
        log_probs: `(k, W)` their log-probs.
        versions: per row, the policy version of each new token.
        finished: per row, whether it ended (False: interrupted, resumable).
    """
    width = carried.responses.shape[1]
    for j, i in enumerate(rows):
        done, n = int(carried.lengths[i]), int(lengths[j])
        n = min(n, width - done)
        carried.responses[i, done : done + n] = responses[j, :n]
        carried.log_probs[i, done : done + n] = log_probs[j, :n]
        carried.versions[i, done : done + n] = torch.tensor(versions[j][:n], dtype=torch.long)
        carried.lengths[i] = done + n
        carried.finished[i] = bool(finished[j]) or done + n >= width


def version_bounds(versions: torch.Tensor, default: int) -> tuple[np.ndarray, np.ndarray]:
    """verl's ``min_global_steps`` / ``max_global_steps`` per row: the min / max policy version
    over the row's sampled tokens; ``default`` for a row with none.

    Args:
        versions: `(B, R)` int64 ``rollout_policy_versions``.
        default: version given to rows without a sampled token.

    Returns:
        Two `(B,)` int64 arrays.
    """
    sampled = versions >= 0
    big = torch.iinfo(torch.long).max
    lo = (
        torch.where(sampled, versions, big).min(dim=1).values
        if versions.shape[1]
        else torch.full((len(versions),), big)
    )
    hi = torch.where(sampled, versions, -1).max(dim=1).values if versions.shape[1] else torch.full((len(versions),), -1)
    any_sampled = sampled.any(dim=1)
    lo = torch.where(any_sampled, lo, default)
    hi = torch.where(any_sampled, hi, default)
    return lo.numpy().astype(np.int64), hi.numpy().astype(np.int64)
