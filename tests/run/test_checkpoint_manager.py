"""Crash-safe checkpoint directories (issue 4): atomic publish, validation, fallback, pruning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from verl.run.checkpoint import LATEST_FILE, CheckpointError, CheckpointManager, check_checkpoint


def _writer(payload: bytes):
    def write(tmp: Path) -> None:
        (tmp / "actor").mkdir()
        (tmp / "actor" / "model.safetensors").write_bytes(payload)
        (tmp / "trainer_state.pt").write_bytes(b"state")

    return write


def test_save_publishes_atomically_and_points_latest(tmp_path):
    mgr = CheckpointManager(tmp_path)
    path = mgr.save(2, _writer(b"x" * 100))
    assert path.name == "global_step_2" and check_checkpoint(path) is None
    assert (tmp_path / LATEST_FILE).read_text() == "2"
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())
    assert mgr.find_resume("auto") == path
    assert mgr.find_resume("disable") is None


def test_crash_inside_write_leaves_previous_latest(tmp_path):
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, _writer(b"a" * 10))

    def crash(tmp: Path) -> None:
        (tmp / "actor").mkdir()
        (tmp / "actor" / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt  # the process dies mid-save

    with pytest.raises(KeyboardInterrupt):
        mgr.save(2, crash)
    assert (tmp_path / LATEST_FILE).read_text() == "1"
    assert mgr.find_resume("auto").name == "global_step_1"


def test_truncated_latest_falls_back_with_warning_and_explicit_path_fails(tmp_path, caplog):
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, _writer(b"a" * 50))
    latest = mgr.save(2, _writer(b"b" * 50))
    weights = latest / "actor" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])  # hand-truncated
    with caplog.at_level(logging.WARNING):
        assert mgr.find_resume("auto").name == "global_step_1"
    assert "truncated" in caplog.text and "global_step_2" in caplog.text
    with pytest.raises(CheckpointError, match="truncated"):
        mgr.find_resume("resume_path", str(latest))


def test_corrupted_bytes_and_missing_manifest_are_detected(tmp_path):
    mgr = CheckpointManager(tmp_path)
    path = mgr.save(3, _writer(b"c" * 64))
    (path / "actor" / "model.safetensors").write_bytes(b"d" * 64)  # same size, other bytes
    assert "SHA-256" in check_checkpoint(path)
    (path / "manifest.json").unlink()
    assert "manifest" in check_checkpoint(path)
    assert mgr.find_resume("auto") is None


def test_max_keep_prunes_oldest(tmp_path):
    mgr = CheckpointManager(tmp_path, max_keep=2)
    for step in (1, 2, 3):
        mgr.save(step, _writer(b"z"))
    assert [p.name for p in mgr.step_dirs()] == ["global_step_2", "global_step_3"]
