"""Keeps the rollout engine on the actor's current weights.

World size 1 (local backend): the engine generates with the actor module itself — no copy, no
sync cost. World size > 1 (FSDP2): the actor is sharded, and generating through a sharded module
would issue one all-gather per layer per decoded token, with a different token count on every
rank (ranks stop at different lengths), so the engine holds an unsharded copy that is refreshed
after every update from the gathered full state (``get_model_state_dict(full_state_dict=True)``),
a collective all ranks enter together. The cost is one full gather per RL step
(reported as ``timing_s/weight_sync``) and one extra copy of the weights; the same seam serves
external engines (vLLM, SGLang), whose ``update_weights`` receives the same state dict.
"""

from __future__ import annotations

import time
from typing import Any

from verl.engine import TrainingEngine
from verl.protocol import DataProto


class SyncedRollout:
    """A rollout engine plus the weight-sync policy described in the module docstring.

    Args:
        engine: a `RolloutEngine` (``generate_sequences``, ``update_weights``).
        shared: True when the engine generates with the actor module itself (no sync needed).
    """

    def __init__(self, engine: Any, shared: bool) -> None:
        self.engine, self.shared = engine, shared
        self._stale = False
        self.last_sync_s = 0.0

    def mark_stale(self) -> None:
        """The actor changed (an update or a checkpoint load): sync before the next generation."""
        self._stale = True

    def sync_weights(self, actor: TrainingEngine, force: bool = False) -> None:
        """Refresh the engine's weights from ``actor`` when stale (a collective: every rank calls it)."""
        if self.shared or not (self._stale or force):
            return
        start = time.perf_counter()
        self.engine.update_weights(actor.state_for_rollout())
        self.last_sync_s = time.perf_counter() - start
        self._stale = False

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Delegate to the engine."""
        return self.engine.generate_sequences(prompts)
