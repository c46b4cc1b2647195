"""Crash-safe checkpoint directories: ``<root>/global_step_N/{actor,critic,...}``.

A checkpoint becomes the latest only once it is complete:
1. every file is written into ``<root>/.tmp_global_step_N`` (by the workers and the trainer);
2. a ``manifest.json`` listing each file's size and SHA-256 is written, every file and
   directory is fsync'ed;
3. the temporary directory is renamed to ``global_step_N`` (atomic on POSIX);
4. ``latest_checkpointed_iteration.txt`` is replaced atomically (write, fsync, rename).
A crash at any point leaves either the previous latest or the new one, never a half one.

On resume, a checkpoint is valid only if its manifest exists and every listed file has the
recorded size and hash. ``auto`` falls back to the newest valid checkpoint with a warning
naming what was wrong; an explicit ``resume_path`` to an invalid one raises.

Shared by every run that writes checkpoints (RL, SFT/DPO, `verl merge`); what an RL run puts in one
is `verl.trainer.ppo.checkpoint`. The RNG helpers capture and restore the Python, NumPy and torch
generators in a form ``torch.load(weights_only=True)`` accepts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch


if TYPE_CHECKING:
    pass

from verl.utils.errors import UserError

logger = logging.getLogger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
TMP_PREFIX = ".tmp_"  # CheckpointManager.save writes <root>/.tmp_global_step_N first


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (or of the file ``path``); links are not followed."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that was asked for explicitly is missing, partial or corrupted."""

    kind = "checkpoint error"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(Path(dirpath) / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def step_of(path: Path) -> int:
    """The N of a ``global_step_N`` directory."""
    match = _STEP_DIR.match(Path(path).name)
    if not match:
        raise CheckpointError(f"{path} is not a global_step_N checkpoint directory")
    return int(match.group(1))


def check_checkpoint(path: Path) -> str | None:
    """Why ``path`` is not a complete checkpoint, or None when it is."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} does not exist"
    manifest = path / MANIFEST
    if not manifest.is_file():
        return f"{path} has no {MANIFEST} (incomplete save)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as e:
        return f"{manifest} is unreadable ({e})"
    for rel, meta in files.items():
        f = path / rel
        if not f.is_file():
            return f"{path}: file {rel} is missing"
        if f.stat().st_size != meta["size"]:
            return f"{path}: file {rel} has {f.stat().st_size} bytes, expected {meta['size']} (truncated?)"
        if _sha256(f) != meta["sha256"]:
            return f"{path}: file {rel} fails its SHA-256 check (corrupted)"
    return None


class CheckpointManager:
    """Writes and finds checkpoints under ``root``.

    Args:
        root: ``trainer.default_local_dir``.
        max_keep: keep at most this many complete checkpoints (None = all). The trainer passes
            the smaller of ``max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep`` that is set,
            since a step directory is only resumable with all its roles.
    """

    def __init__(self, root: str | Path, max_keep: int | None = None) -> None:
        self.root = Path(root)
        self.max_keep = max_keep

    def temporaries(self) -> list[Path]:
        """Unfinished ``.tmp_*`` entries directly under ``root`` (a save interrupted by a crash or a full disk)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.name.startswith(TMP_PREFIX))

    def remove_temporaries(self) -> int:
        """Delete `temporaries` (call at the start of a run that owns ``root``); returns the bytes freed."""
        freed = 0
        for p in self.temporaries():
            size = tree_bytes(p)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            if not p.exists() and not p.is_symlink():
                freed += size
                logger.warning("removed the unfinished checkpoint %s (%d bytes) left by an interrupted save", p, size)
        return freed

    def step_dirs(self) -> list[Path]:
        """``global_step_N`` directories, oldest first."""
        if not self.root.is_dir():
            return []
        dirs = [p for p in self.root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
        return sorted(dirs, key=step_of)

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        """Run ``write(tmp_dir)`` and publish it atomically as ``global_step_<step>``."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"global_step_{step}"
        tmp = self.root / f".tmp_global_step_{step}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            write(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk: give the space back at once
            raise
        files = {
            str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)}
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(self.root)
        _atomic_write_text(self.root / LATEST_FILE, str(step))
        self._prune()
        return final

    def _prune(self) -> None:
        if not self.max_keep or self.max_keep < 1:
            return
        complete = [d for d in self.step_dirs() if (d / MANIFEST).is_file()]
        for old in complete[: -self.max_keep]:
            shutil.rmtree(old, ignore_errors=True)

    def find_resume(self, mode: str, resume_path: str | None = None) -> Path | None:
        """The checkpoint to resume from under ``trainer.resume_mode``, or None.

        Raises:
            CheckpointError: ``resume_path`` mode with a missing or invalid checkpoint.
        """
        if mode == "disable":
            return None
        if mode == "resume_path":
            if not resume_path:
                raise CheckpointError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
            problem = check_checkpoint(Path(resume_path))
            if problem:
                raise CheckpointError(f"cannot resume from trainer.resume_from_path: {problem}")
            return Path(resume_path)
        return self._latest_valid()

    def _latest_valid(self) -> Path | None:
        pointer = self.root / LATEST_FILE
        candidates = list(reversed(self.step_dirs()))
        if pointer.is_file():
            try:
                latest = self.root / f"global_step_{int(pointer.read_text().strip())}"
            except ValueError:
                logger.warning("%s is unreadable; scanning for checkpoints", pointer)
            else:
                problem = check_checkpoint(latest)
                if problem is None:
                    return latest
                logger.warning("latest checkpoint is not usable: %s; falling back to an older one", problem)
                candidates = [d for d in candidates if step_of(d) < step_of(latest)] + [
                    d for d in candidates if step_of(d) > step_of(latest)
                ]
        for d in candidates:
            problem = check_checkpoint(d)
            if problem is None:
                return d
            logger.warning("skipping checkpoint: %s", problem)
        return None


HF_CONFIG = "config.json"
TOKENIZER_DIR = "tokenizer"  # checkpoints written before the huggingface/ layout kept the tokenizer here
HF_SUBDIR = "huggingface"  # verl's layout: <role>/huggingface/{config.json, generation_config.json, tokenizer files}


def save_export_files(model_cfg: Any, tokenizer: Any, role_dir: str | Path) -> Path:
    """Write ``<role_dir>/huggingface/``: what makes a merged checkpoint load with ``from_pretrained``.

    As verl lays out a role's checkpoint: the HF ``config.json`` of the role's architecture, its
    ``generation_config.json`` when the model has one, and the tokenizer files (called by the
    trainer for every checkpoint; read by `verl merge` and ``python -m verl.model_merger``).

    Args:
        model_cfg: the role's model config (``actor_rollout_ref.model`` or ``critic.model`` with
            its ``path`` resolved); ``path`` and ``trust_remote_code`` as used for training.
        tokenizer: the run's tokenizer, or None (parts built without one export the config only).
        role_dir: the checkpoint's ``actor`` or ``critic`` directory.

    Returns:
        The ``huggingface`` directory written.
    """
    from transformers import AutoConfig, GenerationConfig

    from verl.modules.factory import resolve_model_path

    out = Path(role_dir) / HF_SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    source = resolve_model_path(model_cfg.path)
    AutoConfig.from_pretrained(source, trust_remote_code=model_cfg.trust_remote_code).save_pretrained(str(out))
    try:
        GenerationConfig.from_pretrained(source).save_pretrained(str(out))
    except OSError:  # the model ships no generation_config.json: nothing to carry over
        pass
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states in a form `torch.load(weights_only=True)` accepts."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch global RNGs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
