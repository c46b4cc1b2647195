"""``colocate_async`` through the agent loops (multi-turn, tools): the long tail is paused in place.

An agent-loop trajectory cannot resume from a partial output (its tool calls, turns and messages
live in its coroutine), so the long-tail cut does not interrupt the call: the call runs in a
background thread (`OpenCall`), the agent loops' finish hook hands over each trajectory as its
coroutine ends, and once the step's batch is ready the engine is paused at a decode-step boundary
(`verl.workers.rollout.partial.PartialRollout.pause`) with the unfinished trajectories parked in
place. The trainer trains on the actor module that the engine reads (one pool, world size 1);
the next step announces the new version while the decode loops are parked
(``set_policy_version``: a parked loop rebuilds its KV cache under the new weights) and resumes
the call. A trajectory whose tool call spans the cut keeps its layout: the turn sampled before the
cut carries version ``v``, the tool-output tokens ``response_mask`` 0 and no version
(`NOT_SAMPLED`), the turn after the cut version ``v + 1`` (``rollout_policy_versions`` come from
the engine's per-token versions).

At most one call is open: a step first resumes the open call, and only once it has returned are
the fresh prompts generated in a new call (the carried long tail first, as with the ``hf`` cut).
A group's rows are taken from the call's output when the call has returned (failed or aborted
rows included), else from the rows the hook handed over (every row of the group finished); the
training batch keeps the non-tensor fields every group has (the token-drift flags are set on a
call's whole output only).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from verl.protocol import DataProto
from verl.trainer.async_rl.flights import Flight, span
from verl.trainer.ppo.metrics import reduce_worker_metrics

if TYPE_CHECKING:
    from verl.trainer.async_rl.colocate import ColocateAsyncLoop

__all__ = ["OpenCall", "agent_generate", "close_open_call", "common_fields", "settle_open_call", "uses_agent_loops"]

PAUSE_TIMEOUT_S = 600.0  # longest wait for every decode loop to reach a step boundary


def uses_agent_loops(rollout_cfg: Any, engine: Any) -> bool:
    """Whether the engine's training rows run through agent loops (``multi_turn.enable``, another
    default agent loop, or ``rollout.mode=async``) rather than the batched ``hf`` decode."""
    if not hasattr(engine, "agent_names"):
        return False
    return bool(
        rollout_cfg.multi_turn.enable
        or rollout_cfg.agent.default_agent_loop != "single_turn_agent"
        or rollout_cfg.mode == "async"
    )


class OpenCall:
    """One ``generate_sequences`` call of a worker group, running in a daemon thread.

    Args:
        wg: the actor-rollout group.
        engine: its agent-loop engine (``on_trajectories_finished`` is set for the call's life).
        batch: the call's rows, ``n`` consecutive rows per flight.
        flights: the call's flights, in row order.
        n: rows per flight.
        on_rows: also called with ``(rows, data)`` for every handed-over row (streamed scores).
    """

    def __init__(
        self,
        wg: Any,
        engine: Any,
        batch: DataProto,
        flights: list[Flight],
        n: int,
        on_rows: Callable[[list[int], DataProto], None] | None,
    ) -> None:
        self.wg, self.engine, self.flights, self.n = wg, engine, flights, n
        self.cond = threading.Condition()
        self.rows: dict[int, DataProto] = {}  # call row -> its one-row output
        self.done, self.out, self.error = False, None, None
        self._on_rows = on_rows
        self._previous = engine.on_trajectories_finished
        engine.on_trajectories_finished = self._hook
        self._thread = threading.Thread(target=self._run, args=(batch,), name="colocate-agent-call", daemon=True)
        self._thread.start()

    def _hook(self, rows: list[int], data: DataProto) -> None:
        if self._previous is not None:
            self._previous(rows, data)
        if self._on_rows is not None:
            self._on_rows(rows, data)
        with self.cond:
            for k, r in enumerate(rows):
                self.rows[int(r)] = data[k : k + 1]
            self.cond.notify_all()

    def _run(self, batch: DataProto) -> None:
        try:
            self.out = self.wg.generate_sequences(batch)
        except BaseException as e:  # re-raised in the trainer's thread by `take`
            self.error = e
        finally:
            self.engine.on_trajectories_finished = self._previous
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def complete(self, i: int) -> bool:
        """Every row of flight ``i`` (index in the call) handed over (call with ``cond`` held)."""
        return all(i * self.n + j in self.rows for j in range(self.n))

    def all_complete(self) -> bool:
        """Every row of the call handed over (it is about to return)."""
        with self.cond:
            return len(self.rows) == len(self.flights) * self.n

    def wait(self, until: Callable[[], bool]) -> None:
        """Block until the call returned or ``until()`` holds (evaluated under ``cond``)."""
        with self.cond:
            self.cond.wait_for(lambda: self.done or until())
        if self.done:
            self._thread.join()

    def take(self) -> tuple[list[tuple[Flight, DataProto]], dict[str, float]]:
        """The call's flights that can be scored now, with their ``n`` output rows, and the
        call's generation metrics ({} while it runs).

        Raises:
            Exception: what the call raised.
        """
        if self.error is not None:
            raise self.error
        out, metrics = [], {}
        with self.cond:
            if self.done:
                metrics = reduce_worker_metrics(self.out.meta_info.pop("metrics", {}))
                out = [
                    (f, self.out[i * self.n : (i + 1) * self.n]) for i, f in enumerate(self.flights) if not f.finished
                ]
            else:
                out = [
                    (f, DataProto.concat([self.rows[i * self.n + j] for j in range(self.n)]))
                    for i, f in enumerate(self.flights)
                    if not f.finished and self.complete(i)
                ]
        return out, metrics


def _ready_with(loop: ColocateAsyncLoop, call: OpenCall, version: int) -> bool:
    """`flights.ready` counting the call's fully handed-over flights as finished (``cond`` held)."""
    index = {f.uid: i for i, f in enumerate(call.flights)}

    def done(f: Flight) -> bool:
        return f.finished or (f.uid in index and call.complete(index[f.uid]))

    if sum(done(f) for f in loop.flights) < loop.k:
        return False
    if loop.strategy == "wait":
        limit = max(1, int(loop.threshold))
        return not any(not done(f) and span(f, version) >= limit for f in loop.flights)
    return True


def agent_generate(loop: ColocateAsyncLoop, version: int) -> bool:
    """Generate until `ColocateAsyncLoop._ready`; True when the open call was paused with
    trajectories unfinished (the long-tail cut)."""
    engine = loop.engine
    engine.set_policy_version(version)  # no decode loop, or every one parked: tokens from here on are v
    paused = False
    while not loop._ready(version):
        call = loop._open
        if call is None:
            fresh = [f for f in loop.flights if not f.started and not f.finished]
            if not fresh:
                raise RuntimeError("colocate_async: no prompt left to generate and the batch is not ready")
            call = loop._open = loop._start_call(fresh, version)
        elif loop._paused:
            _resume(engine)
            loop._paused = False
        call.wait(lambda c=call: _ready_with(loop, c, version))
        if not call.done and call.all_complete():
            call.wait(lambda: False)  # nothing left to carry: the call is returning
        if not call.done:
            engine.pause(timeout=PAUSE_TIMEOUT_S)
            loop._paused = paused = True
        finished, metrics = call.take()
        if finished:
            loop._score(finished, metrics)
        if call.done:
            loop._open, paused = None, False
    return paused


def _resume(engine: Any) -> None:
    """Resume the parked decode loops in eval mode: they parked in it, and the update in between
    put the shared actor module in train mode (dropout would change the sampled tokens)."""
    module = getattr(engine, "module", None)
    if module is not None:
        module.eval()
    engine.resume()


def settle_open_call(loop: ColocateAsyncLoop) -> None:
    """Let the open call finish under the current weights (version ``global_step``) and score what
    it finishes (before a validation pass, which generates on the same engine)."""
    call = loop._open
    if call is None:
        return
    loop.engine.set_policy_version(loop.t.global_step)
    if loop._paused:
        _resume(loop.engine)
        loop._paused = False
    call.wait(lambda: False)
    finished, metrics = call.take()
    if finished:
        loop._score(finished, metrics)
    loop._open = None


def close_open_call(loop: ColocateAsyncLoop) -> None:
    """End the open call without keeping its unfinished trajectories (interrupted at the next decode
    step; their prompts stay in the flights, saved with a checkpoint)."""
    call = loop._open
    if call is None:
        return
    loop.engine.interrupt()
    if loop._paused:
        loop.engine.resume()
        loop._paused = False
    call.wait(lambda: False)
    loop.engine.clear_interrupt()
    loop._open = None


def common_fields(parts: list[DataProto]) -> list[DataProto]:
    """``parts`` with only the non-tensor fields all of them hold (so that they concatenate)."""
    keys = set.intersection(*(set(p.non_tensor_batch) for p in parts))
    for p in parts:
        for k in set(p.non_tensor_batch) - keys:
            p.non_tensor_batch.pop(k)
    return parts
