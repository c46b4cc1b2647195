"""The rollout thread of ``separate_async``: generates and scores submitted prompts continuously.

It drives the rollout worker group (its own pool: a second in-process group locally, Ray actors
otherwise) from a background thread of the driver, so generation runs while the trainer thread
updates the actor: on Ray the two groups are different processes; in process torch releases the
GIL inside its kernels, so both threads compute at once.

Each request is one submission (whole prompt groups: ``rollout.n`` rows per prompt). One
generation call holds ``lock`` (validation on the rollout group takes it too). Weight syncs:

* ``partial=True`` (the in-process ``hf`` engine, which pauses in place): the trainer streams the
  weights while a call is in flight; `RolloutWorker.begin_weight_update` parks every decode loop
  at a step boundary, the buckets load, and each trajectory continues from its prefix under the
  new weights (partial rollouts: one trajectory may span versions). The engine tags each sampled
  token with the version it was handed (`SplitActorRollout.policy_version`, actor updates);
  `translate_versions` turns those into this loop's versions (syncs) with the map the trainer
  registers before each sync (`map_version`).
* ``partial=False`` (Ray, vLLM): the sync takes ``lock``, so a call in flight finishes on the old
  weights and all its tokens carry the version loaded when it started.

Every generated row gets ``rollout_policy_versions`` `(B, R)` int64 (-1 where no policy sampled:
padding, tool tokens). The group is then scored here, in this thread (the reward overlaps
training), and put into the `ReplayBuffer`. With ``generate`` (streaming rewards,
`verl.trainer.ppo.streaming_reward`) each trajectory is scored as soon as the engine finishes it, while
the call goes on, and the last scores are waited for by a finisher thread (which also puts the
groups, in call order) while this thread starts the next call: no reward time is spent between
two generation calls. ``timing_s/rollouter_reward``: from the end of a call to its groups being
put (scoring after generation: the whole reward; streaming: the tail).

Idle time (``rollouter/idle_ratio``) = time waiting for a request or for the lock.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.async_rl.replay_buffer import ReplayBuffer
from verl.trainer.ppo.metrics import reduce_worker_metrics
from verl.workers.rollout.trajectories import agent_loop_metrics

__all__ = ["Request", "Rollouter", "VERSIONS_KEY", "translate_versions"]

VERSIONS_KEY = "rollout_policy_versions"


@dataclass
class Request:
    """One submission: prompt rows and their generation batch.

    Attributes:
        uids: the prompts' ids, in row order.
        batch: the prompt rows (non-tensor fields, one row per prompt).
        gen: the generation batch (``rollout.n`` rows per prompt, with ``sample_seeds``).
    """

    uids: list[str]
    batch: DataProto
    gen: DataProto


class Rollouter:
    """Background generation into a `ReplayBuffer`.

    Args:
        rollout_wg: the rollout worker group (``generate_sequences``).
        buffer: where scored groups go.
        score: ``score(batch, pending) -> metrics``: writes ``token_level_scores`` into the batch
            (``pending``: the streamed scores of its call, or None).
        n: trajectories per prompt (``rollout.n``).
        generate: ``generate(wg, gen, prompts) -> (out, pending)`` (`RLTrainer.generate_scored`);
            None = ``wg.generate_sequences(gen)``, scored after the call.
    """

    def __init__(
        self,
        rollout_wg: Any,
        buffer: ReplayBuffer,
        score: Callable[..., dict[str, float]],
        n: int,
        partial: bool = False,
        generate: Callable[..., tuple[DataProto, Any]] | None = None,
    ) -> None:
        self.rollout_wg, self.buffer, self.score, self.n = rollout_wg, buffer, score, n
        self.generate = generate or (lambda wg, gen, prompts: (wg.generate_sequences(gen), None))
        self.partial = partial
        self.lock = threading.Lock()
        self.version = 0  # weights loaded in the rollout group (changed by the trainer)
        self._engine_versions: dict[int, int] = {}  # engine's version tag -> loop version
        self._queue: queue.Queue[Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._finisher: ThreadPoolExecutor | None = None  # streamed calls: last scores + puts, in call order
        self.idle_s = 0.0
        self.busy_s = 0.0

    def start(self) -> None:
        """Start the thread (once)."""
        self._thread = threading.Thread(target=self._run, name="verl-rollouter", daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The rollout thread (None before `start`)."""
        return self._thread

    def map_version(self, engine_version: int, version: int) -> None:
        """Tokens the engine tags ``engine_version`` were sampled by loop version ``version``."""
        self._engine_versions[int(engine_version)] = int(version)

    def submit(self, request: Request) -> None:
        """Queue a request (generated in submission order)."""
        self._queue.put(request)

    def stop(self, timeout_s: float | None = None) -> None:
        """Finish the call in flight, drop queued requests, and end the thread."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._finisher is not None:
            self._finisher.shutdown(wait=True)

    def take_idle_ratio(self) -> float:
        """Share of the time since the last call that the thread was idle, then reset."""
        idle, busy = self.idle_s, self.busy_s
        self.idle_s = self.busy_s = 0.0
        return idle / (idle + busy) if idle + busy > 0 else 0.0

    # ------------------------------------------------------------------------ thread
    def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            request = self._queue.get()
            self.idle_s += time.perf_counter() - t0
            if request is None:
                return
            try:
                self._serve(request)
            except BaseException as error:  # noqa: BLE001 - handed to the trainer, which raises it
                self.buffer.fail(error)
                return

    def _serve(self, request: Request) -> None:
        t0 = time.perf_counter()
        with self.lock:
            t1 = time.perf_counter()
            self.idle_s += t1 - t0
            version = self.version
            request.gen.meta_info["policy_version"] = version
            batch = request.batch.repeat(self.n, interleave=True)
            out, pending = self.generate(self.rollout_wg, request.gen, batch)
        metrics = reduce_worker_metrics(out.meta_info.pop("metrics", {}))
        metrics.update(agent_loop_metrics(out))
        batch.union(out)
        # without partial rollouts the call ran under the sync lock: every sampled token is the
        # version loaded at its start; with them the engine's tags (its units) are translated
        mask = batch.batch["response_mask"].bool()
        tags = batch.batch[VERSIONS_KEY] if self.partial and VERSIONS_KEY in batch.batch.keys() else None
        if tags is not None:
            batch.batch[VERSIONS_KEY] = translate_versions(tags, mask, self._engine_versions)
        else:
            batch.batch[VERSIONS_KEY] = torch.where(mask, torch.full_like(mask, version, dtype=torch.int64), -1)
        if pending is None:
            self._finish(request, batch, metrics, None, time.perf_counter())
        else:
            if self._finisher is None:
                self._finisher = ThreadPoolExecutor(1, thread_name_prefix="verl-rollouter-finish")
            self._finisher.submit(self._finish_or_fail, request, batch, metrics, pending, time.perf_counter())
        self.busy_s += time.perf_counter() - t1

    def _finish(
        self, request: Request, batch: DataProto, metrics: dict[str, float], pending: Any, ended: float
    ) -> None:
        """Score the call's batch (wait for its streamed scores) and put its groups."""
        metrics.update(self.score(batch, pending))
        metrics["timing_s/rollouter_reward"] = time.perf_counter() - ended
        for i, uid in enumerate(request.uids):
            self.buffer.put(uid, batch[i * self.n : (i + 1) * self.n], metrics)

    def _finish_or_fail(self, *args: Any) -> None:
        try:
            self._finish(*args)
        except BaseException as error:  # noqa: BLE001 - handed to the trainer, which raises it
            self.buffer.fail(error)


def translate_versions(tags: torch.Tensor, response_mask: torch.Tensor, mapping: dict[int, int]) -> torch.Tensor:
    """Engine version tags `(B, R)` as loop versions; -1 outside ``response_mask``.

    Raises:
        KeyError: a sampled token carries a tag no sync registered.
    """
    out = torch.full_like(tags, -1, dtype=torch.int64)
    mask = response_mask.bool()
    for tag in torch.unique(tags[mask]).tolist():
        if int(tag) not in mapping:
            raise KeyError(
                f"rollout_policy_versions: engine version {int(tag)} was never synced (known: {sorted(mapping)})"
            )
        out[mask & (tags == tag)] = mapping[int(tag)]
    return out
