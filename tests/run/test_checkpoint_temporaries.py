"""After a full disk: the unfinished ``.tmp_*`` save is removed (at once, and at the next start),
and the space check's message carries real sizes."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
from run_helpers import tiny_run_overrides

from verl.config import load_config
from verl.run.checkpoint import CheckpointManager
from verl.utils.errors import DiskError


def _cfg(model_dir: Path, run_dir: Path):
    return load_config(None, tiny_run_overrides(model_dir, run_dir, **{"trainer.save_freq": 1}))


def _free(monkeypatch, free: int) -> None:
    import verl.run.preflight as pf

    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - free, free))


def test_no_room_message_has_real_sizes(tiny_model_dir, tmp_path, monkeypatch) -> None:
    from verl.run.preflight import _size, estimate_checkpoint_bytes, run_preflight

    cfg = _cfg(tiny_model_dir, tmp_path)
    need = estimate_checkpoint_bytes(cfg)
    assert need < 0.005 * 2**30  # the tiny model: "0.00 GiB" in a fixed GiB format
    _free(monkeypatch, need // 2)
    with pytest.raises(DiskError) as e:
        run_preflight(cfg)
    text = str(e.value)
    assert f"has {_size(need // 2)} free, one checkpoint needs about {_size(need)}" in text, text
    assert "0.00" not in text and " 0.0 " not in text


def test_unfinished_save_is_counted_as_free_and_removed_at_start(tiny_model_dir, tmp_path, monkeypatch) -> None:
    from verl.run.preflight import estimate_checkpoint_bytes, prepare_run

    cfg = _cfg(tiny_model_dir, tmp_path)
    need = estimate_checkpoint_bytes(cfg)
    ckpt = Path(cfg.trainer.default_local_dir)
    half = ckpt / ".tmp_global_step_3" / "actor"
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"\0" * need)  # what the full disk stopped
    elsewhere = tmp_path / "other_run" / ".tmp_global_step_1"
    elsewhere.mkdir(parents=True)
    _free(monkeypatch, need // 2)  # too little without the stale save, enough with it
    prepare_run(cfg)
    assert not (ckpt / ".tmp_global_step_3").exists()
    assert elsewhere.is_dir()  # only this run's checkpoint folder is cleaned


def test_a_failed_save_removes_its_temporary(tmp_path) -> None:
    mgr = CheckpointManager(tmp_path / "ckpt")

    def write(tmp: Path) -> None:
        (tmp / "part.bin").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        mgr.save(1, write)
    assert not list((tmp_path / "ckpt").iterdir())  # no .tmp_global_step_1 left behind
