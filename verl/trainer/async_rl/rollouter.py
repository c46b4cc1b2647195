"""The rollout thread of ``separate_async``: generates and scores submitted prompts continuously.

It drives the rollout worker group (its own pool: a second in-process group locally, Ray actors
otherwise) from a background thread of the driver, so generation runs while the trainer thread
updates the actor: on Ray the two groups are different processes; in process torch releases the
GIL inside its kernels, so both threads compute at once.

Each request is one submission (whole prompt groups: ``rollout.n`` rows per prompt). One
generation call holds ``lock``; the trainer takes the same lock to stream new weights (or to
validate on the rollout group), so weights never change under a running generation: a call in
flight when the trainer wants to sync finishes on the old weights and its tokens carry the old
version (no partial rollouts). Every generated row gets ``rollout_policy_versions`` `(B, R)`
int64: the version loaded during its generation on every sampled token, -1 elsewhere. The group is then
scored here, in this thread (the reward overlaps training), and put into the `ReplayBuffer`.

Idle time (``rollouter/idle_ratio``) = time waiting for a request or for the lock.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.async_rl.replay_buffer import ReplayBuffer
from verl.trainer.metrics import reduce_worker_metrics
from verl.workers.rollout.trajectories import agent_loop_metrics

__all__ = ["Request", "Rollouter", "VERSIONS_KEY"]

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
        score: ``score(batch) -> metrics``: writes ``token_level_scores`` into the batch.
        n: trajectories per prompt (``rollout.n``).
    """

    def __init__(self, rollout_wg: Any, buffer: ReplayBuffer, score: Callable[[DataProto], dict[str, float]], n: int) -> None:
        self.rollout_wg, self.buffer, self.score, self.n = rollout_wg, buffer, score, n
        self.lock = threading.Lock()
        self.version = 0  # weights loaded in the rollout group (changed by the trainer under `lock`)
        self._queue: queue.Queue[Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.idle_s = 0.0
        self.busy_s = 0.0

    def start(self) -> None:
        """Start the thread (once)."""
        self._thread = threading.Thread(target=self._run, name="verl-rollouter", daemon=True)
        self._thread.start()

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
            out = self.rollout_wg.generate_sequences(request.gen)
        metrics = reduce_worker_metrics(out.meta_info.pop("metrics", {}))
        metrics.update(agent_loop_metrics(out))
        batch = request.batch.repeat(self.n, interleave=True)
        batch.union(out)
        # the call ran under the lock, so every sampled token is the loaded version's; the engine's
        # own tags (if any) count in its units, these in syncs (verl's versions); -1 where the
        # policy sampled nothing (padding, tool tokens), as the engines tag them
        mask = batch.batch["response_mask"].bool()
        batch.batch[VERSIONS_KEY] = torch.where(mask, torch.full_like(mask, version, dtype=torch.int64), -1)
        metrics.update(self.score(batch))
        for i, uid in enumerate(request.uids):
            self.buffer.put(uid, batch[i * self.n:(i + 1) * self.n], metrics)
        self.busy_s += time.perf_counter() - t1
