"""Keeps the rollout engine on the actor's current weights.

World size 1 (local backend): the engine generates with the actor module itself — no copy, no
sync cost. World size > 1 (FSDP2): the actor is sharded, and generating through a sharded module
would issue one all-gather per layer per decoded token, with a different token count on every
rank (ranks stop at different lengths), so the engine holds an unsharded copy that is refreshed
after every update from the gathered full state (``get_model_state_dict(full_state_dict=True)``),
a collective all ranks enter together. The cost is one full gather per RL step
(reported as ``timing_s/update_weights``, verl's name) and one extra copy of the weights. An
engine that holds its own weights and declares ``streams_weights`` (vLLM) receives the actor
module instead and gathers it one bucket at a time, so no rank holds a second whole unsharded copy.

An engine that generates with its own transformers module (``hf``: it has a ``module``) is
refreshed in place, parameter by parameter (`sync_in_place`): each trainable parameter is
gathered (`verl.workers.rollout.weight_sync.full_tensor`, one all-gather per parameter) and copied
into the engine's tensor of the same name (`weight_sync.load_bucket_in_place`), so at most one
unsharded parameter is alive beyond the engine's copy, no state dict is built or key-matched, and
frozen parameters and buffers (LoRA base weights, rotary tables) are copied once, at the first
sync, never again. An engine that ``streams_weights`` gets the buckets of `weight_sync` (the same
cut as the separate rollout pool's).

With ``rollout.sync_check.enable`` every sync is followed by an attestation
(`verl.workers.sync_attest`: fingerprints of both sides, the policy version, a canary every
``canary_every`` syncs); an engine that generates with the actor module itself has no copy to
attest. Its metrics are reported with the sync time (`take_sync_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch

from verl.engine import TrainingEngine
from verl.protocol import DataProto
from verl.workers.rollout.weight_sync import full_tensor, load_bucket_in_place


@torch.no_grad()
def sync_in_place(
    source: torch.nn.Module,
    target: torch.nn.Module,
    trainable_only: bool = False,
    stats: dict[str, float] | None = None,
) -> int:
    """Copy ``source``'s (possibly FSDP2-sharded) parameters and buffers into ``target``'s tensors.

    A collective when ``source`` is sharded: every rank must call it with the same modules.

    Args:
        source: the actor (plain or sharded: DTensor parameters are gathered one at a time).
        target: an unsharded module with the same parameter names (the rollout's copy).
        trainable_only: copy only parameters with ``requires_grad`` (the ones an update changes).
        stats: filled with ``peak_extra_bytes``: the bytes of the largest whole tensor this rank
            gathered beyond its shard (one is alive at a time; 0 when ``source`` is unsharded).

    Returns:
        Number of tensors copied.

    Raises:
        KeyError: a source tensor has no counterpart of the same name in ``target``.
    """
    items = [(n, p) for n, p in source.named_parameters() if p.requires_grad or not trainable_only]
    if not trainable_only:
        items += list(source.named_buffers())
    # a generator: each parameter is gathered just before its copy, so one unsharded tensor at a time
    peak = [0]

    def gathered() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in items:
            whole = full_tensor(tensor)
            if whole is not tensor:  # a gathered copy (a DTensor shard made whole)
                peak[0] = max(peak[0], whole.numel() * whole.element_size())
            yield name, whole

    copied = load_bucket_in_place(target, gathered())
    if stats is not None:
        stats["peak_extra_bytes"] = float(peak[0])
    return copied


class SyncedRollout:
    """A rollout engine plus the weight-sync policy described in the module docstring.

    Args:
        engine: a `RolloutEngine` (``generate_sequences``, ``update_weights``).
        shared: True when the engine generates with the actor module itself (no sync needed).
        sync_check: ``rollout.sync_check`` (`SyncCheckConfig`); None = no attestation.

    Attributes:
        policy_version: actor updates so far (`mark_stale` calls); ``rollout_version``: the
            version the engine was last synced to.
    """

    def __init__(self, engine: Any, shared: bool, sync_check: Any = None) -> None:
        from verl.workers.sync_attest import SyncAttestor
        from verl.workers.sync_attest_sides import default_canary_tolerance

        self.engine, self.shared = engine, shared
        self._stale, self._synced_once = False, False
        self.last_sync_s = 0.0
        self.sync_stats: dict[str, float] = {}  # the last in-place sync's peak_extra_bytes (sync_in_place)
        self._unreported_s = 0.0
        self.policy_version = self.rollout_version = 0
        use = sync_check is not None and sync_check.enable and not shared
        self.attestor = SyncAttestor(sync_check, default_canary_tolerance(engine)) if use else None

    def mark_stale(self) -> None:
        """The actor was updated: sync before the next generation."""
        self._stale = True
        self.policy_version += 1

    def sync_weights(self, actor: TrainingEngine, force: bool = False) -> None:
        """Refresh the engine's weights from ``actor`` when stale (a collective: every rank calls it)."""
        if self.shared or not (self._stale or force):
            return
        start = time.perf_counter()
        target = getattr(self.engine, "module", None)
        if getattr(self.engine, "streams_weights", False):
            # the engine (vLLM) gathers one bucket at a time itself: no whole unsharded copy
            with actor.on_device():
                self.engine.update_weights(actor.module)
        elif isinstance(target, torch.nn.Module) and isinstance(getattr(actor, "module", None), torch.nn.Module):
            sync_in_place(actor.module, target, trainable_only=self._synced_once and not force, stats=self.sync_stats)
        else:
            self.engine.update_weights(actor.state_for_rollout())
        self.last_sync_s = time.perf_counter() - start
        self._unreported_s += self.last_sync_s
        self._stale, self._synced_once = False, True
        self.rollout_version = self.policy_version
        if self.attestor is not None:
            from verl.workers.sync_attest_sides import attest_engine

            with actor.on_device():
                attest_engine(self.attestor, actor.module, self.engine, self.policy_version, self.rollout_version)

    def take_sync_metrics(self) -> dict[str, float]:
        """The last attestation's ``sync/*`` metrics and ``timing_s/sync_check`` ({} without one), then reset."""
        return self.attestor.take_metrics() if self.attestor is not None else {}

    def take_unreported_sync_s(self) -> float:
        """Seconds of every sync since the last call (0.0 if none), then reset.

        The trainer reports this once per step with the actor update (``timing_s/update_weights``),
        so a sync done in a generation whose metrics are not logged (validation, a dynamic-sampling
        round) still counts, and a step without a sync reports 0 instead of an old value.
        """
        seconds, self._unreported_s = self._unreported_s, 0.0
        return seconds

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Delegate to the engine."""
        return self.engine.generate_sequences(prompts)
