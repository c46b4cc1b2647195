"""Who owns a checkpoint folder: one run per ``trainer.default_local_dir``.

The rule (README, "Checkpoint folders"):

- A run's identity is a fingerprint of what it trains: ``trainer.project_name``,
  ``trainer.experiment_name``, ``actor_rollout_ref.model.path``, ``data.train_files``,
  ``algorithm.adv_estimator``, ``critic.enable`` and ``trainer.seed``. Relaunching the same
  command (even with more steps, another learning rate, other loggers or another number of
  workers) is the same run and resumes; changing any of those keys makes another run.
- The first run that uses a checkpoint folder writes ``verl_run.json`` (the fingerprint and the
  keys it was made from) into it, before its first step.
- A run refuses to start — whatever ``trainer.resume_mode`` is — when the folder's
  ``verl_run.json`` belongs to another run: it would otherwise resume from the other run's
  weights (``auto``), or overwrite / prune its ``global_step_N`` directories (``disable``). The
  one-line error names both runs' differing keys. To continue deliberately from another run's
  checkpoint, give the new run its own ``trainer.default_local_dir`` and
  ``trainer.resume_mode=resume_path trainer.resume_from_path=<that global_step_N>``; to take
  over a folder, delete its ``verl_run.json``.
- A folder holding checkpoints but no ``verl_run.json`` (written by an older verl) is adopted
  by the first run that uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from verl.utils.errors import CheckpointLoadError

OWNER_FILE = "verl_run.json"


def run_keys(cfg: Any) -> dict[str, Any]:
    """The config values that identify a run (see module docstring)."""
    train_files = cfg.data.train_files
    return {
        "trainer.project_name": cfg.trainer.project_name,
        "trainer.experiment_name": cfg.trainer.experiment_name,
        "actor_rollout_ref.model.path": str(cfg.actor_rollout_ref.model.path),
        "data.train_files": [str(f) for f in ([train_files] if isinstance(train_files, str) else train_files)],
        "algorithm.adv_estimator": cfg.algorithm.adv_estimator,
        "critic.enable": bool(cfg.critic.enable),
        "trainer.seed": int(cfg.trainer.seed),
    }


def fingerprint(keys: dict[str, Any]) -> str:
    """SHA-256 (16 hex digits) of the canonical JSON of `run_keys`."""
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def check_owner(cfg: Any) -> str:
    """Check that ``trainer.default_local_dir`` is free or this run's; returns a status line.

    Raises:
        CheckpointLoadError: the folder belongs to another run.
    """
    root = Path(cfg.trainer.default_local_dir)
    owner = root / OWNER_FILE
    if not owner.is_file():
        return f"{root}: no other run's checkpoints (run id {fingerprint(run_keys(cfg))})"
    try:
        theirs = json.loads(owner.read_text())
    except ValueError as e:
        raise CheckpointLoadError(f"{owner} is unreadable ({e}); delete it to let this run use {root}") from None
    mine = run_keys(cfg)
    if theirs.get("run_id") == fingerprint(mine):
        return f"{root}: this run's folder (run id {theirs['run_id']})"
    diff = [
        f"{k}={theirs.get('keys', {}).get(k)!r} there vs {v!r} here"
        for k, v in mine.items()
        if theirs.get("keys", {}).get(k) != v
    ]
    raise CheckpointLoadError(
        f"trainer.default_local_dir {root} holds checkpoints of another run (run id {theirs.get('run_id')}; "
        f"{'; '.join(diff) or 'different keys'}); refusing to resume from or overwrite them: use a new "
        f"trainer.default_local_dir (with trainer.resume_mode=resume_path trainer.resume_from_path=<its "
        f"global_step_N> to start from one of them), or delete {owner} to take the folder over"
    )


def claim_owner(cfg: Any) -> None:
    """Write ``verl_run.json`` into ``trainer.default_local_dir`` (atomic; no-op when already this run's).

    Raises:
        CheckpointLoadError: the folder belongs to another run (see `check_owner`).
    """
    check_owner(cfg)
    root = Path(cfg.trainer.default_local_dir)
    owner = root / OWNER_FILE
    if owner.is_file():
        return
    root.mkdir(parents=True, exist_ok=True)
    keys = run_keys(cfg)
    tmp = owner.with_name(f".{OWNER_FILE}.tmp")
    tmp.write_text(json.dumps({"run_id": fingerprint(keys), "keys": keys}, indent=1))
    os.replace(tmp, owner)
