"""Config section of the weight-sync attestation (not a verl key).

Kept apart from :mod:`verl.config.schema` (verl's key layout); the rollout section holds this one
as ``actor_rollout_ref.rollout.sync_check``. Each field is documented right under it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SYNC_MISMATCH_ACTIONS", "SyncCheckConfig"]

SYNC_MISMATCH_ACTIONS = frozenset({"error", "warn"})


@dataclass
class SyncCheckConfig:
    """Weight-sync attestation after every actor -> rollout sync (`verl.workers.sync_attest`)."""

    enable: bool = True
    # Fingerprint both sides after each sync (strided samples of every tensor, hashed; the policy
    # version) and report sync/fingerprint_match, sync/policy_version. Engines that generate with
    # the actor's own module (hf at world size 1, colocated) have no copy and nothing to check.
    canary_every: int = 10
    # Score the fixed canary token sequence on both sides every this many syncs (the first
    # included) and report sync/canary_max_abs_diff (nats); 0 = never.
    on_mismatch: str = "error"
    # error: stop the run with one line naming the differing tensors | warn: log that line and go on.
    canary_tolerance: float | None = None
    # Largest canary log-prob difference (nats) that still matches; None = 1e-4 for the hf engine
    # (both sides an fp32-or-same-dtype forward of the same weights), 0.1 for vLLM (its own
    # kernels, usually in bfloat16).
