"""Worker methods of the weight-sync attestation with a rollout on its own group (``hybrid_engine=false``).

`verl.trainer.ppo.split_rollout.SplitActorRollout` drives the check after each sync: it asks the
rollout group for its fingerprints (`RolloutAttestMixin.sync_fingerprints`, every rank), hands
rank 0's to the actor group, which hashes its own tensors in the same dtypes
(`ActorAttestMixin.sync_expected`, a collective under FSDP2), and, on canary syncs, scores the
canary on both (`sync_canary`). Fingerprints cross the worker boundary as plain lists
(`Fingerprint.to_wire`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from verl.single_controller.base import Dispatch, register
from verl.workers.sync_attest import Fingerprint, canary_ids, module_canary
from verl.workers.sync_attest_sides import (
    actor_expected,
    default_canary_tolerance,
    engine_canary,
    engine_fingerprints,
    streams_weights,
    vocab_size,
)

__all__ = ["ActorAttestMixin", "RolloutAttestMixin"]


class ActorAttestMixin:
    """The actor's side; mixed into `ActorRolloutRefWorker` (``self.actor_engine``)."""

    actor_engine: Any

    @register(Dispatch.ONE_TO_ALL)
    def sync_expected(self, actual: dict[str, list[Any]], vllm_names: bool) -> dict[str, list[Any]]:
        """The actor's fingerprints, hashed in the dtypes of the rollout's ``actual`` (wire form).

        Args:
            actual: the rollout's fingerprints (`Fingerprint.to_wire` values).
            vllm_names: name the tensors as a vLLM engine receives them (checkpoint names, adapter).
        """
        theirs = {name: Fingerprint.from_wire(w) for name, w in actual.items()}
        with self.actor_engine.on_device():
            mine = actor_expected(self.actor_engine.module, theirs, vllm_names)
        return {name: fp.to_wire() for name, fp in mine.items()}

    @register(Dispatch.ONE_TO_ALL)
    def sync_canary(self) -> tuple[list[int], torch.Tensor]:
        """The canary ids and the actor's log-probs of them `(len - 1,)` (a collective under FSDP2)."""
        module = self.actor_engine.module
        ids = canary_ids(vocab_size(module))
        with self.actor_engine.on_device():
            return ids, module_canary(module, ids)


class RolloutAttestMixin:
    """The rollout's side; mixed into `RolloutWorker` (``self.engine``, ``self.module``)."""

    engine: Any
    module: Any
    policy_version: int

    def _attest_target(self) -> Any:
        """What holds the weights: the engine (vLLM) or the worker's module (hf)."""
        return self.engine if self.module is None else SimpleNamespace(module=self.module)

    @register(Dispatch.ONE_TO_ALL)
    def sync_fingerprints(self) -> dict[str, Any]:
        """This rank's side: ``{"version", "vllm", "fingerprints"}`` (fingerprints in wire form)."""
        fps = engine_fingerprints(self._attest_target())
        return {
            "version": int(self.policy_version),
            "vllm": self.module is None and streams_weights(self.engine),
            "fingerprints": {name: fp.to_wire() for name, fp in fps.items()},
        }

    @register(Dispatch.RANK_ZERO)
    def sync_canary_tolerance(self) -> float:
        """The default canary tolerance of this engine (`default_canary_tolerance`)."""
        return default_canary_tolerance(self._attest_target())

    @register(Dispatch.ONE_TO_ALL)
    def sync_canary(self, ids: list[int]) -> torch.Tensor:
        """The engine's canary log-probs `(len(ids) - 1,)`."""
        return engine_canary(self._attest_target(), ids)
