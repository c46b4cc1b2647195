"""``trainer.v1.trainer_mode=colocate_async``: asynchronous RL on one pool (verl's V1 shape).

The actor and the rollout share the same workers (the hybrid engine, ``hybrid_engine=true``), so
generation and training never run at the same instant. What overlaps is generation of the next
batch with the long tail of the current one (verl ``verl/trainer/ppo/v1/trainer_colocate_async.py``:
warm-up batches + partial rollout). One RL step at trainer version ``v`` (= ``global_step``):

1. submit ``data.train_batch_size`` (K) prompts; before the first step also
   ``colocate_async.num_warmup_batches`` x K: the batches generated ahead;
2. staleness control (``trainer.v1.sampler``, `verl.trainer.async_rl.flights`): ``drop`` evicts
   every group whose span ``v - submit_version + 1`` exceeds the threshold and submits as many
   fresh prompts; ``wait`` evicts nothing and lets groups at the threshold finish first;
3. generate until K groups are finished (generated and scored): the carried long tails first,
   oldest first, each resuming from its prefix under the current weights, then the fresh prompts
   (`flights.call_plan`); each call's rows decode together. As soon as K groups are finished the
   call is interrupted at the next decode step (the long-tail cut): the unfinished trajectories
   keep their tokens and are carried into the next step, where they continue under the new
   weights (partial rollouts: one trajectory may span several versions);
4. train on the K oldest finished groups as the synchronous loop does (`RLTrainer._update_stages`:
   one RL step of ``ppo_mini_batch_size`` mini-batches); the weights the rollout reads are the
   actor's own, so the next step generates with version ``v + 1``.

Every sampled token carries the version that sampled it (``rollout_policy_versions`` `(B, R)`,
the engine's ``policy_version`` set to ``v`` before each step's generation), which gives verl's
``training/off_policy/trajectory_{spans,staleness,staleness_worst}/*`` (`off_policy_metrics`).

With ``num_warmup_batches=0`` only the step's own K prompts are in flight, nothing is cut, and
the run equals ``sync`` step for step (same prompts, uids, seeds, tokens). A ``drop`` eviction
happens before generation (verl evicts a stale group once it finishes; evicting it as soon as it
is stale spares the pool the generation of a group that can never be trained).

Streaming rewards (``reward_model.streaming``, `verl.trainer.ppo.streaming_reward`): the same finish
hook hands each trajectory to the trainer's scorer the moment the engine finishes it, also a row
that finishes in a later call than its group mates; a group's reward stage then only waits for
its last scores (rows never handed over are scored then). Where nothing streams (a batch or
custom manager, a colocated reward model, ``streaming=false``) the finished groups of a call are
scored together after it, with the same scores.

``timing_s/gen`` is the step's generation phase (its reward calls included, also reported alone as
``timing_s/reward``), as verl times the wait for a trainable batch. Metrics added per step:
``training/off_policy/*`` (with ``evicted_samples``),
``colocate_async/long_tail_cut`` (1 when a generation call was interrupted with trajectories
unfinished),
``colocate_async/carried_groups`` (groups left unfinished, carried to the next step) and
``colocate_async/buffer_sampleable`` (finished groups left for the next step).

Checkpoints save every prompt submitted but not trained (`PromptFeed.state`); a resumed run
generates them again first, so across a kill no prompt is lost and none is trained twice (those
evicted by ``drop`` are dropped on purpose).

Runs on the in-process ``hf`` engine (``trainer.backend=local``): the long-tail cut is the
engine's finish hook (``on_trajectories_finished``) interrupting its decode loop. On Ray workers
(``trainer.backend=ray``, FSDP2 over the pool) the engines run in the workers' processes, out of
the hook's reach: no call is cut (each generates its rows to the end; the warm-up batches still
run ahead), the call's tokens are tagged with its version on the driver, and rewards are scored
after each call. Through the
agent loops (multi-turn, tools) the call runs in a thread and the cut pauses it in place instead
(`verl.trainer.async_rl.colocate_agent`): its unfinished trajectories continue in the next step.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from verl.config.errors import not_supported
from verl.protocol import DataProto
from verl.single_controller.local import LocalWorkerGroup
from verl.reward.streaming import merge_scored
from verl.trainer.async_rl.colocate_agent import (
    OpenCall,
    agent_generate,
    close_open_call,
    common_fields,
    settle_open_call,
    uses_agent_loops,
)
from verl.trainer.async_rl.feed import PromptFeed
from verl.trainer.async_rl.flights import CutWatch, Flight, call_plan, pick, ready, span, stale
from verl.trainer.async_rl.loop import _chunk_metrics, train_until_done
from verl.trainer.async_rl.off_policy import off_policy_metrics
from verl.trainer.async_rl.replay_buffer import _eviction_metrics
from verl.trainer.async_rl.rollouter import VERSIONS_KEY
from verl.trainer.ppo.metrics import reduce_worker_metrics, timer
from verl.trainer.ppo.streaming_reward import build_streaming_rewards
from verl.workers.rollout.partial import NOT_SAMPLED
from verl.workers.rollout.trajectories import agent_loop_metrics

if TYPE_CHECKING:
    from verl.trainer.ppo.trainer import RLTrainer

__all__ = ["ColocateAsyncLoop", "local_engine"]

_STATE_KEY = "colocate_async"


def local_engine(actor_rollout_wg: Any) -> Any | None:
    """The rollout engine of an in-process hybrid actor-rollout group (the hook and interrupt
    target), or None for a group whose engines run in other processes (Ray workers).

    Raises:
        ConfigError: an in-process group whose engine has no finish hook or interrupt (a split rollout).
    """
    if not isinstance(actor_rollout_wg, LocalWorkerGroup):
        return None
    workers = actor_rollout_wg.workers
    rollout = getattr(workers[0], "rollout", None) if len(workers) == 1 else None
    engine = getattr(rollout, "engine", None)
    if engine is None or not hasattr(engine, "on_trajectories_finished") or not hasattr(engine, "interrupt"):
        raise not_supported(
            "trainer.v1.trainer_mode",
            "colocate_async runs on the hybrid hf engine only "
            "(one in-process worker or Ray workers, rollout.name=hf, hybrid_engine=true)",
        )
    return engine


class ColocateAsyncLoop:
    """The ``colocate_async`` loop over an `RLTrainer`'s parts and stages (see the module docstring).

    Interface shared with `SeparateAsyncLoop`: `run`, `start`, `step_once`, `stop`.
    """

    def __init__(self, trainer: RLTrainer) -> None:
        self.t, self.cfg = trainer, trainer.config
        self.p = trainer._parts()
        self.engine = local_engine(self.p.actor_rollout_wg)
        self.warmup = self.cfg.trainer.v1.colocate_async.num_warmup_batches
        sampler = self.cfg.trainer.v1.sampler
        self.threshold, self.strategy = sampler.max_off_policy_threshold, sampler.max_off_policy_strategy
        self.k = self.cfg.data.train_batch_size
        self.n = self.cfg.actor_rollout_ref.rollout.n
        self.feed = PromptFeed(self.p.train_dataloader, self.cfg.trainer.seed, self.n)
        self.flights: list[Flight] = []  # submitted, neither trained nor evicted (submission order)
        self._seq = 0
        self._out_meta: dict[str, Any] = {}
        self._timing: dict[str, float] = {}  # the step's timers (the reward of each call adds to it)
        self.trained_uids: list[str] = []  # every prompt trained by this process, in order
        self.evicted_uids: list[str] = []  # every prompt dropped as stale, in eviction order
        self.agent = self.engine is not None and uses_agent_loops(self.cfg.actor_rollout_ref.rollout, self.engine)
        self._open: OpenCall | None = None  # agent loops: the call running or paused in place
        self._paused = False

    # ------------------------------------------------------------------------- run
    def run(self) -> list[dict[str, float]]:
        """Resume, train until ``total_training_steps``; returns the metrics."""
        try:
            if self.start():
                self._train_loop()
        finally:
            self.stop()
        return self.p.history

    def start(self) -> bool:
        """Resume, validate before training and submit the warm-up batches (or the saved
        prompts); False when there is nothing to train (done, or ``val_only``)."""
        t, p, cfg = self.t, self.p, self.cfg
        resumed = t._load_checkpoint()
        p.tracker.keep_until(t.global_step if resumed else -1)
        if t.global_step >= p.total_training_steps:
            print(
                f"Training already complete: global_step {t.global_step} >= total_training_steps "
                f"{p.total_training_steps}; nothing to do.",
                flush=True,
            )
            return False
        ahead = self.warmup * self.k
        if resumed and _STATE_KEY in t.state.extra:
            self.feed.load(t.state.extra[_STATE_KEY])
            ahead = len(self.feed.reservoir)  # the saved prompts, generated again first
        if cfg.trainer.val_before_train and p.val_dataloader is not None and not resumed:
            val = t._validate()
            p.tracker.log(val, step=t.global_step)
            p.history.append({"step": t.global_step, **val})
            if cfg.trainer.val_only:
                return False
        if ahead:
            self._submit(ahead)
        return True

    def stop(self) -> None:
        """End an agent-loop call paused in place (`close_open_call`); nothing else runs between steps."""
        close_open_call(self)

    def step_once(self) -> dict[str, float]:
        """One RL step (``global_step`` advanced); returns its metrics."""
        metrics = self._step()
        self.t.global_step += 1
        return metrics

    def _train_loop(self) -> None:
        train_until_done(self, _STATE_KEY)

    def _validation_guard(self) -> Any:
        settle_open_call(self)  # validation generates on the same engine: nothing may stay paused
        return contextlib.nullcontext()

    def _pending_rows(self) -> list[Any]:
        return [f.row for f in self.flights]

    # ------------------------------------------------------------------------ one step
    def _step(self) -> dict[str, float]:
        t, version = self.t, self.t.global_step
        timing: dict[str, float] = {}
        self._timing = timing
        with timer("step", timing):
            self._submit(self.k)
            evictions = self._evict(version)
            with timer("gen", timing):  # as verl: waiting for K finished groups is generation
                cut = self._generate(version)
            groups = pick(self.flights, self.k)
            chosen = {g.uid for g in groups}
            self.flights = [f for f in self.flights if f.uid not in chosen]
            self.trained_uids += [g.uid for g in groups]
            batch = _training_batch(groups, {**self._out_meta, "global_step": version})
            metrics = {**evictions, **_chunk_metrics(groups)}
            metrics.update(off_policy_metrics(batch.batch[VERSIONS_KEY], batch.batch["response_mask"], version))
            metrics["colocate_async/long_tail_cut"] = float(cut)
            metrics["colocate_async/carried_groups"] = float(sum(f.started and not f.finished for f in self.flights))
            metrics["colocate_async/buffer_sampleable"] = float(sum(f.finished for f in self.flights))
            entropys = t._update_stages(batch, metrics, timing)
        t.epoch = max(g.row.epoch for g in groups)
        t._step_metrics(batch, metrics, timing, entropys)
        metrics.update(t.guards.after_step(t, batch, metrics))  # alarms and divergence sentinel, as in sync
        return metrics

    def _evict(self, version: int) -> dict[str, float]:
        """``drop``: evict the stale groups and submit as many fresh prompts (fresh ones are never stale)."""
        gone = stale(self.flights, version, self.threshold, self.strategy)
        spans = [span(f, version) for f in gone]
        if gone:
            ids = {f.uid for f in gone}
            self.flights = [f for f in self.flights if f.uid not in ids]
            self.evicted_uids += [f.uid for f in gone]
            self._submit(len(gone))
        return _eviction_metrics(spans)

    # ------------------------------------------------------------------------ generation
    def _generate(self, version: int) -> bool:
        """Generate until `ready`; True when trajectories were left unfinished (the long-tail cut)."""
        if self.agent:
            return agent_generate(self, version)
        if self.engine is not None:
            self.engine.set_policy_version(version)  # every token sampled in this step is version v
        cut = False
        for flights in call_plan(self.flights):
            if self._ready(version):
                break
            cut = self._call(flights, version) or cut
        return cut

    def _start_call(self, flights: list[Flight], version: int) -> OpenCall:
        """Start an agent-loop call on ``flights`` in its own thread (`colocate_agent.OpenCall`)."""
        meta = {**self._gen_meta, "global_step": version}
        for f in flights:
            f.gen.meta_info, f.started = dict(meta), True
        stream = self._stream()

        def on_rows(rows: list[int], data: DataProto) -> None:
            self._stream_rows(stream, flights, rows, data)

        batch = DataProto.concat([f.gen for f in flights])
        return OpenCall(self.p.actor_rollout_wg, self.engine, batch, flights, self.n, on_rows if stream else None)

    def _ready(self, version: int) -> bool:
        return ready(self.flights, version, self.k, self.threshold, self.strategy)

    def _call(self, flights: list[Flight], version: int) -> bool:
        """One generation call on ``flights``; scores those it finishes. True when it was cut
        (interrupted with trajectories unfinished)."""
        meta = {**self._gen_meta, "global_step": version}
        gens = []
        for f in flights:
            f.gen.meta_info = dict(meta)
            gens.append(f.gen)
        batch = DataProto.concat(gens)
        finished_before = sum(f.finished for f in self.flights)
        # a cut is possible only when more groups are in flight than the batch still needs
        # (and, with wait, when no group that must finish first waits for a later call)
        limit = max(1, int(self.threshold))
        must_finish = {
            f.uid for f in self.flights if self.strategy == "wait" and not f.finished and span(f, version) >= limit
        }
        here = {f.uid for f in flights}
        watch = None
        if (
            self.engine is not None
            and sum(not f.finished for f in self.flights) > self.k - finished_before
            and must_finish <= here
        ):
            must = {i for i, f in enumerate(flights) if f.uid in must_finish}
            watch = CutWatch(flights, self.n, finished_before, self.k, must, self.engine.interrupt)
        out = self._engine_call(batch, watch, flights)
        if self.engine is None:  # Ray workers: nothing is cut, every token of the call is sampled by version v
            out.batch[VERSIONS_KEY] = torch.where(out.batch["response_mask"].bool(), version, NOT_SAMPLED).long()
        metrics = reduce_worker_metrics(out.meta_info.pop("metrics", {}))
        self._out_meta = dict(out.meta_info)
        done_rows = out.batch["rollout_finished"].bool()
        finished: list[tuple[Flight, DataProto]] = []
        for i, f in enumerate(flights):
            f.gen, f.started = out[i * self.n : (i + 1) * self.n], True
            if bool(done_rows[i * self.n : (i + 1) * self.n].all()):
                finished.append((f, f.gen))
        if finished:
            self._score(finished, metrics)
        return watch is not None and watch.fired and len(finished) < len(flights)

    def _engine_call(self, batch: DataProto, watch: CutWatch | None, flights: list[Flight]) -> DataProto:
        """``generate_sequences`` through the worker group, with the streamed scores and the cut
        watch on the engine's finish hook (in that order: a row is submitted before a cut)."""
        wg = self.p.actor_rollout_wg
        stream = self._stream() if self.engine is not None else None  # a Ray engine's hook cannot reach the driver
        if watch is None and stream is None:
            return wg.generate_sequences(batch)
        previous = self.engine.on_trajectories_finished

        def hook(rows: list[int], data: DataProto) -> None:
            if previous is not None:
                previous(rows, data)
            if stream is not None:
                self._stream_rows(stream, flights, rows, data)
            if watch is not None:
                watch.rows_finished(rows, data)

        self.engine.on_trajectories_finished = hook
        try:
            return wg.generate_sequences(batch)
        finally:
            self.engine.on_trajectories_finished = previous
            self.engine.clear_interrupt()

    def _stream(self) -> Any:
        """The trainer's `StreamingRewards` (built once, as `RLTrainer.generate_scored` does), or
        None where rewards are scored after generation (``reward_model.streaming=false``, a batch
        or custom manager, a colocated reward model)."""
        t = self.t
        if t._streaming is None:
            t._streaming = build_streaming_rewards(self.cfg, self.p.reward_fn, self.p.rm_wg) or False
        return t._streaming or None

    def _stream_rows(self, stream: Any, flights: list[Flight], rows: list[int], data: DataProto) -> None:
        """Submit the rows the engine just finished to the scorer, each under its own flight
        (``rows``: indices in the call, ``n`` consecutive rows per flight; ``data``: their output)."""
        by_flight: dict[int, list[int]] = {}
        for k, r in enumerate(rows):
            by_flight.setdefault(int(r) // self.n, []).append(k)
        for i, ks in by_flight.items():
            f, local = flights[i], [int(rows[k]) % self.n for k in ks]
            part = f.prompt.repeat(len(ks), interleave=True)
            part.union(data[torch.tensor(ks)])
            f.streamed += (
                stream.scorer.submit_each(part, local) if stream.per_row else [stream.scorer.submit(part, local)]
            )
            f.streamed_rows.update(local)

    def _streamed(self, stream: Any, finished: list[tuple[Flight, DataProto]], batch: DataProto) -> _Scored:
        """The finished groups' streamed scores (rows never handed over scored now), in ``batch``'s
        row order: ``n`` rows per group."""
        width = batch.batch["responses"].shape[1]
        parts = []
        for i, (f, _) in enumerate(finished):
            rest = [j for j in range(self.n) if j not in f.streamed_rows]
            if rest:
                rows = batch[torch.tensor([i * self.n + j for j in rest])]
                f.streamed += (
                    stream.scorer.submit_each(rows, rest) if stream.per_row else [stream.scorer.submit(rows, rest)]
                )
                f.streamed_rows.update(rest)
            parts.append(merge_scored(f.streamed, self.n, width))
        return _Scored(_concat_scored(parts, self.n))

    def _score(self, finished: list[tuple[Flight, DataProto]], gen_metrics: dict[str, float]) -> None:
        """Score the groups a call finished, together (as one synchronous batch would be); with
        streaming rewards their rows were scored as the engine finished them."""
        batch = DataProto.concat([f.prompt for f, _ in finished]).repeat(self.n, interleave=True)
        out = DataProto.concat(common_fields([g for _, g in finished]))
        batch.union(out)
        metrics = dict(gen_metrics)
        metrics.update(agent_loop_metrics(out))
        stream = self._stream() if self.engine is not None else None
        with timer("reward", self._timing):
            pending = self._streamed(stream, finished, batch) if stream is not None else None
            metrics.update(self.t._compute_reward(batch, pending))
        for i, (f, _) in enumerate(finished):
            f.data, f.chunk_metrics = batch[i * self.n : (i + 1) * self.n], metrics

    # ----------------------------------------------------------------------- submission
    def _submit(self, k: int) -> None:
        """Register the next ``k`` prompts (generated by the coming steps' calls)."""
        t = self.t
        rows = self.feed.take(k)
        batch = DataProto.concat([r.data for r in rows])
        batch.non_tensor_batch["uid"] = np.array([r.uid for r in rows], dtype=object)
        gen = t._gen_batch(batch, validate=False).repeat(self.n, interleave=True)
        gen.batch["sample_seeds"] = torch.cat([r.seeds for r in rows])
        self._gen_meta = {k_: v for k_, v in gen.meta_info.items() if k_ != "global_step"}
        for i, r in enumerate(rows):
            self.flights.append(
                Flight(
                    r.uid,
                    self._seq,
                    t.global_step,
                    row=r,
                    prompt=batch[i : i + 1],
                    gen=gen[i * self.n : (i + 1) * self.n],
                )
            )
            self._seq += 1


class _Scored:
    """Scores already merged, in the shape `RLTrainer._compute_reward` reads from a `PendingReward`."""

    def __init__(self, result: dict[str, Any]) -> None:
        self._result = result

    def result(self, batch: DataProto) -> dict[str, Any]:
        """The merged scores (``batch``: the scored rows, the same order)."""
        return self._result


def _concat_scored(parts: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Groups' `merge_scored` results one after the other (``n`` rows each): ``reward_tensor``
    `(len(parts) * n, R)`, ``reward_extra_info`` lists (None where a group's manager did not report
    the key), ``reward_metrics`` summed, and ``reward_failures`` summed when every group reported them
    (the trainer's reward-failure policy then sees hung scorers, as in the synchronous step)."""
    extra: dict[str, list[Any]] = {}
    metrics: dict[str, float] = {}
    for i, part in enumerate(parts):
        for key, values in part["reward_extra_info"].items():
            extra.setdefault(key, [None] * (n * len(parts)))[i * n : (i + 1) * n] = values
        for key, value in part["reward_metrics"].items():
            metrics[key] = metrics.get(key, 0.0) + float(value)
    out = {
        "reward_tensor": torch.cat([p["reward_tensor"] for p in parts]),
        "reward_extra_info": extra,
        "reward_metrics": metrics,
    }
    if parts and all("reward_failures" in p for p in parts):
        out["reward_failures"] = sum((p["reward_failures"] for p in parts[1:]), parts[0]["reward_failures"])
    return out


def _training_batch(groups: list[Flight], meta: dict[str, Any]) -> DataProto:
    """The groups' rows in sampling order, with one meta-info (parts generated at other steps differ)."""
    for g in groups:
        g.data.meta_info = {}
    batch = DataProto.concat(common_fields([g.data for g in groups]))
    batch.meta_info = dict(meta)
    return batch
