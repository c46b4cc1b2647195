"""The actor and a rollout on its own worker group, seen by the loop as one actor-rollout group.

With ``actor_rollout_ref.hybrid_engine=false`` the builder (`verl.trainer.ppo.builders`) makes two
groups: `ActorRolloutRefWorker` without a rollout engine, and `verl.workers.rollout_worker.RolloutWorker`
(on Ray: its own `RayResourcePool`; locally: a second in-process group with its own weights).
`SplitActorRollout` presents them with the `ActorRolloutGroup` methods, so ``RLTrainer.fit`` is
the same loop whether the rollout is colocated or not:

* ``update_actor`` (and ``load_checkpoint``) mark the rollout stale; the next
  ``generate_sequences`` (training, validation, ReMax's greedy baseline) first syncs the weights,
  then generates on the rollout group. Syncing lazily, right before generation, is what the
  colocated `SyncedRollout` does, so a checkpoint load followed by validation is synced too.
* A sync streams buckets: the actor plans the buckets (``begin_weight_stream`` returns their
  count), every actor rank joins the gather of a bucket (FSDP2), rank 0 keeps it where it was made
  (`call_by_reference`: on Ray one object in the object store, owned by actor rank 0; in process
  the tensors themselves) and the reference goes straight to every rollout rank, which fetches the
  bucket from the store and loads it in place. The driver never holds a bucket's bytes. Bucket
  size: ``rollout.checkpoint_engine.update_weights_bucket_megabytes``.
* The first sync and every sync after a checkpoint load are full (all state-dict entries);
  later ones send only the trainable parameters (LoRA: the adapter), except for vLLM without
  LoRA (always full, see `RolloutWorker`).
* Metrics added to ``update_actor``'s output, so once per RL step whatever the step does
  between two updates (validation, ReMax's second generation, several DAPO generation batches):
  ``timing_s/update_weights`` (verl's name: seconds of every sync since the previous report, 0
  when none ran; a sync that validation triggered counts in the next step), ``weight_sync/buckets``,
  ``weight_sync/tensors`` and ``weight_sync/megabytes`` (of the last sync), and
  ``perf/update_weights_peak_extra_mb`` (the colocated engine's name: the largest bucket of whole
  tensors a rollout rank held beyond its own weights, the largest rank's, MiB).
* With ``rollout.sync_check.enable`` each sync is attested (`verl.workers.sync_attest`): every
  rollout rank's fingerprints against the actor's, the policy version the rollout was synced to
  against the actor's update count, and every ``canary_every`` syncs the canary on both groups;
  the ``sync/*`` metrics and ``timing_s/sync_check`` join ``update_actor``'s output.
"""

from __future__ import annotations

import time
from typing import Any

from verl.protocol import DataProto

__all__ = ["SplitActorRollout"]


class SplitActorRollout:
    """An `ActorRolloutGroup` over an actor group and a separate rollout group.

    Args:
        actor_wg: group of `ActorRolloutRefWorker` built with ``hybrid_engine=false``.
        rollout_wg: group of `RolloutWorker` (``init_model`` already called).
        sync_check: ``rollout.sync_check`` (`SyncCheckConfig`); None = no attestation.

    Attributes:
        last_sync: what the last sync moved (``buckets``, ``tensors``, ``bytes``, ``seconds``) and the
            largest rollout rank's ``peak_extra_bytes`` and ``resident_bytes`` (`RolloutWorker.finish_weight_update`).
        syncs: number of syncs done.
    """

    def __init__(self, actor_wg: Any, rollout_wg: Any, sync_check: Any = None) -> None:
        from verl.workers.sync_attest import SyncAttestor

        self.actor_wg, self.rollout_wg = actor_wg, rollout_wg
        use = sync_check is not None and sync_check.enable
        self.attestor = SyncAttestor(sync_check, rollout_wg.sync_canary_tolerance()) if use else None
        self.policy_version = 0  # actor updates so far
        self.world_size = actor_wg.world_size
        self._stale, self._full = True, True
        self._full_always = bool(rollout_wg.full_syncs_only())
        self.last_sync: dict[str, float] = {}
        self.syncs = 0
        self._unreported_s = 0.0  # sync seconds not yet in a step's metrics
        self._closed = False

    # ---------------------------------------------------------------------- weight sync
    def sync_weights(self, force: bool = False) -> float:
        """Stream the actor's weights to every rollout rank when stale (or ``force``); returns seconds.

        Raises:
            RuntimeError: the rollout's share of the sync disagrees with what was sent.
        """
        if not (self._stale or force):
            return 0.0
        start = time.perf_counter()
        full = self._full or force or self._full_always
        n_tensors, buckets = self.actor_wg.begin_weight_stream(not full)[0]
        self.rollout_wg.begin_weight_update(self.policy_version)
        for _ in range(buckets):
            bucket = self.actor_wg.call_by_reference("next_weight_bucket")[
                0
            ]  # every actor rank gathers, rank 0's result
            self.rollout_wg.load_weight_bucket(bucket)
            del bucket  # the last reference, dropped before the next gather: one bucket in the store at a time
        ranks = self.rollout_wg.finish_weight_update()
        for stats in ranks:  # every rollout rank got every bucket
            if int(stats["tensors"]) != n_tensors or int(stats["buckets"]) != buckets:
                raise RuntimeError(
                    f"weight sync: the actor sent {n_tensors} tensors in {buckets} buckets, a rollout "
                    f"rank loaded {int(stats['tensors'])} in {int(stats['buckets'])}"
                )
        self._stale = self._full = False
        self.syncs += 1
        peak = max(float(r.get("peak_extra_bytes", 0.0)) for r in ranks)  # the largest rank's
        resident = max(float(r.get("resident_bytes", 0.0)) for r in ranks)
        self.last_sync = {
            **stats,
            "peak_extra_bytes": peak,
            "resident_bytes": resident,
            "seconds": time.perf_counter() - start,
        }
        self._unreported_s += self.last_sync["seconds"]
        if self.attestor is not None:
            self._attest()
        return self.last_sync["seconds"]

    def _attest(self) -> None:
        """Check every rollout rank against the actor (`verl.workers.sync_attest`).

        Raises:
            SyncAttestationError: a mismatch with ``sync_check.on_mismatch=error``.
        """
        from verl.workers.sync_attest import Fingerprint

        def canary() -> tuple[Any, Any]:
            ids, mine = self.actor_wg.sync_canary()[0]
            return mine, self.rollout_wg.sync_canary(ids)[0]

        with self.attestor.timed():
            ranks = self.rollout_wg.sync_fingerprints()
            actual = [{n: Fingerprint.from_wire(w) for n, w in r["fingerprints"].items()} for r in ranks]
            wire = self.actor_wg.sync_expected(ranks[0]["fingerprints"], bool(ranks[0]["vllm"]))[0]
            expected = {n: Fingerprint.from_wire(w) for n, w in wire.items()}
            self.attestor.check(
                actual, lambda _: expected, self.policy_version, min(int(r["version"]) for r in ranks), canary
            )

    # ------------------------------------------------------------------ ActorRolloutGroup
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sync if the actor changed, then generate on the rollout group."""
        self.sync_weights()
        return self.rollout_wg.generate_sequences(prompts)

    def update_actor(self, data: DataProto) -> DataProto:
        """Update the actor (the rollout is stale until the next generation); adds the sync metrics."""
        out = self.actor_wg.update_actor(data)
        self._stale = True
        self.policy_version += 1
        metrics = out.meta_info.setdefault("metrics", {})
        if self.attestor is not None:
            metrics.update(self.attestor.take_metrics())
        metrics["timing_s/update_weights"], self._unreported_s = self._unreported_s, 0.0
        if self.last_sync:
            metrics["weight_sync/buckets"] = self.last_sync["buckets"]
            metrics["weight_sync/tensors"] = self.last_sync["tensors"]
            metrics["weight_sync/megabytes"] = self.last_sync["bytes"] / 2**20
            metrics["perf/update_weights_peak_extra_mb"] = self.last_sync["peak_extra_bytes"] / 2**20
        return out

    def load_checkpoint(self, in_dir: str) -> None:
        """Restore the actor; the next generation re-syncs the rollout fully."""
        self.actor_wg.load_checkpoint(in_dir)
        self._stale = self._full = True

    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` `(B, R)` from the actor."""
        return self.actor_wg.compute_log_prob(data)

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` `(B, R)` from the actor group's reference."""
        return self.actor_wg.compute_ref_log_prob(data)

    def num_parameters(self) -> int:
        """Actor parameter count."""
        return self.actor_wg.num_parameters()

    def save_checkpoint(self, out_dir: str) -> None:
        """Write the actor's engine state (the rollout's weights are the actor's)."""
        self.actor_wg.save_checkpoint(out_dir)

    def shutdown(self) -> None:
        """Close the rollout engines, then release both groups (idempotent)."""
        if not self._closed:
            self._closed = True
            try:
                self.rollout_wg.close()
            except Exception:  # noqa: BLE001 - a group that already failed is gone; its error was raised
                pass
        self.actor_wg.shutdown()
        self.rollout_wg.shutdown()
