"""Weight-sync attestation: after a sync, check that the rollout engine holds the actor's weights.

A sync that silently misses a tensor, keeps a stale LoRA adapter, casts on the way or lands in a
corrupted engine makes the rollout sample from a policy other than the one being trained, and
nothing else in an RL run notices. After every sync (``actor_rollout_ref.rollout.sync_check``):

* **Fingerprints.** For every tensor, ``SAMPLES`` elements at a fixed stride over the flattened
  tensor (`sample_positions`, the last element always included) are hashed (blake2b of their
  bytes) and summed, on both sides. The rollout side reports the dtype it holds the tensor in
  and the dtype its samples were hashed in (``digest_dtype``: its own storage dtype for the
  ``hf`` engine; vLLM's model dtype for what vLLM's worker received, see
  `verl.workers.rollout.vllm.vllm_worker_ext`); the actor's samples are cast to that dtype before
  hashing, as the engine's own load casts them, so a bf16 engine fed by an fp32 actor matches
  bit for bit. A tensor held or received in another dtype than the actor's (the sync itself
  never casts), missing on the rollout, or with other sample bits is a mismatch, by name.
* **Policy version.** The number of actor updates the rollout was last synced to, next to the
  actor's own count (``sync/policy_version``); a rollout behind the actor is a mismatch.
* **Canary** (every ``canary_every`` syncs, the first included): teacher-forced log-probs of a
  fixed token sequence (`canary_ids`) under the actor and under the engine; the largest
  absolute difference, in nats, must stay within the tolerance. This covers what a sample of
  stored values cannot (vLLM's repacked layers, a perturbation between sampled positions).

Metrics: ``sync/fingerprint_match`` (1.0 / 0.0), ``sync/mismatched_tensors``,
``sync/policy_version``, ``sync/canary_max_abs_diff`` (on canary syncs) and
``timing_s/sync_check`` (seconds of every check since the last report). A mismatch raises
`SyncAttestationError` (one line naming the tensors) or, with ``on_mismatch=warn``, logs that
line once per check and the run goes on.

Cost: two strided gathers of ``SAMPLES`` values per tensor (an FSDP2-sharded actor samples its
local shards and exchanges the samples in one object all-gather) and, every ``canary_every`` syncs,
two forwards of ``len(canary_ids)`` tokens; the figure on the GSM8K bench shape is in
benchmarks/README.md.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from verl.utils.weight_fingerprint import (
    SAMPLES,
    Fingerprint,
    fingerprint,
    fingerprint_named,
    fingerprint_samples,
    gather_samples,
    sample_positions,
)

__all__ = [
    "CANARY_LENGTH",
    "SAMPLES",
    "Fingerprint",
    "SyncAttestationError",
    "SyncAttestor",
    "canary_ids",
    "compare_fingerprints",
    "expected_fingerprints",
    "fingerprint",
    "fingerprint_named",
    "module_canary",
    "module_tensors",
    "sample_positions",
]

logger = logging.getLogger(__name__)

CANARY_LENGTH = 16
"""Tokens of the canary sequence (15 scored positions)."""


class SyncAttestationError(RuntimeError):
    """The rollout engine does not hold the actor's weights after a sync."""


def module_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every state-dict entry of ``module`` as ``(name, tensor)``, tied aliases included; FSDP2
    parameters stay ``DTensor`` shards (`expected_fingerprints` samples them where they live)."""
    yield from module.state_dict(keep_vars=True).items()


def expected_fingerprints(
    items: Iterable[tuple[str, torch.Tensor]], actual: Mapping[str, Fingerprint], samples: int = SAMPLES
) -> dict[str, Fingerprint]:
    """The actor's fingerprints, each hashed in the dtype the rollout hashed its own in.

    A collective when ``items`` holds FSDP2 shards (`gather_samples`: one object all-gather per
    check); every rank calls it with the same items.

    Args:
        items: the actor's ``(name, tensor)`` pairs (full or ``DTensor``), under the rollout's names.
        actual: the rollout's fingerprints (a name it lacks is hashed in the actor's dtype).
    """
    return {
        name: fingerprint_samples(picked, dtype, shape, actual[name].digest_dtype if name in actual else None)
        for name, picked, dtype, shape in gather_samples(items, samples)
    }


def compare_fingerprints(expected: Mapping[str, Fingerprint], actual: Mapping[str, Fingerprint]) -> list[str]:
    """What differs, one entry per tensor of ``expected``: ``"name (why)"``; [] when all match.

    Rollout-only names (non-persistent buffers, an engine's own extras) are not compared.
    """
    out = []
    for name, exp in expected.items():
        got = actual.get(name)
        if got is None:
            out.append(f"{name} (missing on the rollout)")
        elif got.shape != exp.shape:
            out.append(f"{name} (shape {list(got.shape)} on the rollout, actor {list(exp.shape)})")
        elif got.dtype != exp.dtype:
            out.append(f"{name} (dtype {got.dtype} on the rollout, actor {exp.dtype})")
        elif got.digest != exp.digest:
            out.append(f"{name} (values: sample sum {got.sample_sum:.6g} on the rollout, actor {exp.sample_sum:.6g})")
    return out


def canary_ids(vocab_size: int, length: int = CANARY_LENGTH) -> list[int]:
    """The fixed canary token sequence: ``(11 + 7919 * i) mod vocab_size`` for ``i < length``."""
    return [(11 + 7919 * i) % int(vocab_size) for i in range(length)]


@torch.no_grad()
def module_canary(module: nn.Module, ids: list[int]) -> torch.Tensor:
    """Log-probs `(len(ids) - 1,)` (float32, temperature 1) of ``ids[1:]`` given their prefixes.

    The module is put in eval mode for the forward (dropout off) and back; no RNG is consumed.
    """
    device = next(module.parameters()).device
    was_training = module.training
    module.eval()
    try:
        logits = module(input_ids=torch.tensor([ids], device=device)).logits[0, :-1].float()
    finally:
        module.train(was_training)
    targets = torch.tensor(ids[1:], device=device)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0].cpu()


class SyncAttestor:
    """Runs the checks of the module docstring after each sync and keeps their metrics.

    Args:
        config: ``actor_rollout_ref.rollout.sync_check`` (`SyncCheckConfig`).
        default_tolerance: canary tolerance (nats) when ``config.canary_tolerance`` is None
            (`verl.workers.sync_attest_sides.default_canary_tolerance`).
    """

    def __init__(self, config: Any, default_tolerance: float = 1e-4) -> None:
        self.config = config
        tol = getattr(config, "canary_tolerance", None)
        self.tolerance = float(tol) if tol is not None else float(default_tolerance)
        self.checks = 0
        self._metrics: dict[str, float] = {}
        self._seconds = 0.0

    @property
    def enabled(self) -> bool:
        """``sync_check.enable``."""
        return bool(self.config.enable)

    def canary_due(self) -> bool:
        """Whether the next check scores the canary (checks 1, 1 + K, 1 + 2K, ...; K = 0: never)."""
        every = int(self.config.canary_every)
        return every > 0 and self.checks % every == 0

    def check(
        self,
        actual: Mapping[str, Fingerprint] | Sequence[Mapping[str, Fingerprint]],
        expected_fn: Callable[[Mapping[str, Fingerprint]], Mapping[str, Fingerprint]],
        actor_version: int,
        rollout_version: int,
        canary_fn: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> dict[str, float]:
        """Compare one sync's two sides; returns its metrics.

        Args:
            actual: the rollout's fingerprints, or one dict per rollout rank (each is compared).
            expected_fn: computes the actor's from (rank 0's) ``actual`` (`expected_fingerprints`).
            actor_version / rollout_version: actor updates done / synced into the rollout.
            canary_fn: returns (actor, engine) canary log-probs `(CANARY_LENGTH - 1,)`; called
                when `canary_due`.

        Raises:
            SyncAttestationError: a mismatch with ``on_mismatch=error``.
        """
        due = canary_fn is not None and self.canary_due()
        self.checks += 1
        ranks = [actual] if isinstance(actual, Mapping) else list(actual)
        expected = expected_fn(ranks[0])
        problems = []
        for rank, theirs in enumerate(ranks):
            tag = f"rollout rank {rank}: " if len(ranks) > 1 else ""
            problems += [tag + p for p in compare_fingerprints(expected, theirs)]
        if rollout_version != actor_version:
            problems.insert(0, f"policy version {rollout_version} on the rollout, actor {actor_version}")
        metrics = {
            "sync/fingerprint_match": float(not problems),
            "sync/mismatched_tensors": float(len(problems)),
            "sync/policy_version": float(rollout_version),
        }
        if due:
            mine, theirs = canary_fn()
            diff = float((mine.float() - theirs.float()).abs().max()) if mine.numel() else 0.0
            metrics["sync/canary_max_abs_diff"] = diff
            if not diff <= self.tolerance:  # NaN fails too
                problems.append(f"canary log-probs differ by {diff:.3g} nats (tolerance {self.tolerance:g})")
        self._metrics = metrics
        if problems:
            self._report(problems, actor_version)
        return metrics

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's seconds in ``timing_s/sync_check`` (wrap both sides' work and `check`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds += time.perf_counter() - start

    def _report(self, problems: list[str], version: int) -> None:
        shown = "; ".join(problems[:8]) + (f"; ... {len(problems) - 8} more" if len(problems) > 8 else "")
        line = (
            f"weight sync attestation failed after sync {self.checks} (policy version {version}): "
            f"the rollout does not hold the actor's weights: {shown}"
        )
        if self.config.on_mismatch == "warn":
            logger.warning(line)
            return
        raise SyncAttestationError(line + " (actor_rollout_ref.rollout.sync_check.on_mismatch=warn to continue)")

    def take_metrics(self) -> dict[str, float]:
        """The last check's metrics plus ``timing_s/sync_check`` (seconds since the last call), then reset."""
        out = dict(self._metrics)
        if self._metrics or self._seconds:
            out["timing_s/sync_check"] = self._seconds
        self._metrics, self._seconds = {}, 0.0
        return out
