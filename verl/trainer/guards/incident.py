"""Incident bundles: what `verl replay` needs to re-run a tripped step exactly.

Layout of ``<incident_dir>/incident_step_<N>/``:

* ``incident.json``: step, reasons, the step's finite metrics, ``checkpoint`` (the last good
  checkpoint directory, or null = the run's initial weights), ``checkpoint_step``,
  ``replay_steps`` (the steps stored below, oldest first) and ``exact`` (whether they reach back
  to the checkpoint, so replaying them from it reproduces step N bit for bit on CPU);
* ``config.yaml``: the run's resolved config;
* ``steps/step_<k>.pt``: for each replay step, the actor update batch (tensors, non-tensors,
  meta-info), the RNG states right before the update, and the update's recorded
  ``actor/pg_loss`` / ``actor/grad_norm``.

A bundle holds pickled Python objects (the batch's non-tensors): load only bundles you trust,
as with a checkpoint.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.errors import UserError

INCIDENT_FILE = "incident.json"
REPLAY_KEYS = ("actor/pg_loss", "actor/grad_norm")


class BundleError(UserError, FileNotFoundError):
    """A path given as an incident bundle is not one."""

    kind = "incident bundle"


@dataclass
class ReplayStep:
    """One kept actor update: the batch, the RNG states right before it, and its recorded numbers."""

    step: int
    batch: DataProto
    rng: dict[str, Any]
    recorded: dict[str, float] = field(default_factory=dict)


def batch_to_payload(batch: DataProto) -> dict[str, Any]:
    """A `DataProto` as plain containers for `torch.save`."""
    tensors = {k: v.detach().cpu().clone() for k, v in batch.batch.items()} if batch.batch is not None else {}
    return {
        "tensors": tensors,
        "non_tensors": {k: v.copy() for k, v in batch.non_tensor_batch.items()},
        "meta_info": dict(batch.meta_info),
    }


def payload_to_batch(payload: dict[str, Any]) -> DataProto:
    """Inverse of `batch_to_payload`."""
    return DataProto.from_dict(payload["tensors"], payload["non_tensors"], payload["meta_info"])


def write_bundle(
    root: Path,
    step: int,
    reasons: list[str],
    metrics: dict[str, float],
    config: Any,
    steps: list[ReplayStep],
    checkpoint: Path | None,
    checkpoint_step: int,
) -> Path:
    """Write ``incident_step_<step>/`` under ``root`` and return it (see the module docstring).

    Args:
        root: the incident directory.
        step: the tripped step (1-based).
        reasons: why it tripped, one line each.
        metrics: the step's metrics (non-finite values are written as strings).
        config: the resolved `RootConfig`.
        steps: the kept updates, oldest first, the last one being ``step``'s.
        checkpoint: the last good checkpoint directory, None = the initial weights.
        checkpoint_step: its step (0 for the initial weights).
    """
    from verl.config import save_config

    out = root / f"incident_step_{step}"
    (out / "steps").mkdir(parents=True, exist_ok=True)
    for s in steps:
        torch.save(
            {"step": s.step, "batch": batch_to_payload(s.batch), "rng": s.rng, "recorded": s.recorded},
            out / "steps" / f"step_{s.step}.pt",
        )
    save_config(config, out / "config.yaml")
    kept = [s.step for s in steps]
    exact = bool(kept) and kept == list(range(checkpoint_step + 1, step + 1))
    info = {
        "step": step,
        "reasons": reasons,
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "checkpoint_step": checkpoint_step,
        "replay_steps": kept,
        "exact": exact,
        "metrics": {
            k: (float(v) if math.isfinite(float(v)) else str(v))
            for k, v in metrics.items()
            if isinstance(v, (int, float))
        },
    }
    (out / INCIDENT_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return out


def read_bundle(path: str | Path) -> tuple[dict[str, Any], list[ReplayStep]]:
    """``(incident.json, the kept updates oldest first)`` of a bundle directory.

    Raises:
        BundleError: ``path`` has no ``incident.json``.
    """
    root = Path(path)
    info_file = root / INCIDENT_FILE
    if not info_file.is_file():
        raise BundleError(
            f"{root}: not an incident bundle (no {INCIDENT_FILE}); bundles are the incident_step_<N> "
            "directories under <trainer.output_dir>/incidents"
        )
    info = json.loads(info_file.read_text())
    steps = []
    for k in info["replay_steps"]:
        # pickled non-tensors (see the module docstring): a bundle is trusted like a checkpoint
        raw = torch.load(root / "steps" / f"step_{k}.pt", map_location="cpu", weights_only=False)
        steps.append(ReplayStep(int(raw["step"]), payload_to_batch(raw["batch"]), raw["rng"], dict(raw["recorded"])))
    return info, steps
