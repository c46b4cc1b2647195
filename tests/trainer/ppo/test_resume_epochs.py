"""Resuming across epochs, data-order seeding (known_faults B32) and damaged checkpoints, at trainer level.

Data: 8 built-in arithmetic rows in a jsonl file, ``train_batch_size=4`` → 2 steps per epoch,
shuffled with ``data.seed``, constant LR. The prompts a step trains on are recorded from the
batches the trainer itself receives (``extra_info.index`` of each row).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides
from safetensors.torch import load

from verl.config import load_config
from verl.data.builtin_task import load_builtin_rows
from verl.trainer import RLTrainer
from verl.run.checkpoint import CheckpointError

pytestmark = pytest.mark.e2e  # whole training loops (and subprocesses)

VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


class RecordingTrainer(RLTrainer):
    """`RLTrainer` that records the row indices of every training batch, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[list[int]] = []

    def train_step(self, batch_dict: dict[str, Any]) -> dict[str, float]:
        self.seen.append([int(i) for i in batch_dict["index"]])
        return super().train_step(batch_dict)


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "arith8.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in load_builtin_rows("arithmetic", "train")[:8]))
    return path


def _run(model_dir: Path, rows: Path, run_dir: Path, **extra: object) -> RecordingTrainer:
    overrides = tiny_run_overrides(
        model_dir,
        run_dir,
        **{
            "data.train_files": f"[{rows}]",
            "data.shuffle": True,
            "trainer.total_training_steps": "null",
            **extra,
        },
    )
    trainer = RecordingTrainer(config=load_config(None, overrides))
    trainer.fit()
    return trainer


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}


def _weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """Actor weights of a checkpoint, read into memory (not memory-mapped: tests truncate files)."""
    return load((run_dir / "ckpt" / f"global_step_{step}" / "actor" / "model.safetensors").read_bytes())


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, rows_file, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("two_epochs")
    trainer = _run(tiny_model_dir, rows_file, run_dir, **{"trainer.total_epochs": 2, "trainer.save_freq": 4})
    return trainer, run_dir


def test_resume_at_epoch_boundary_continues_with_next_epoch(uninterrupted, tiny_model_dir, rows_file, tmp_path):
    """B32: a run that ended exactly at an epoch boundary, relaunched with more epochs, trains
    epoch 2 on the same prompts in the same order as an uninterrupted run, with equal metrics."""
    ref, ref_dir = uninterrupted
    assert len(ref.seen) == 4 and sorted(ref.seen[0] + ref.seen[1]) == list(range(8))
    assert sorted(ref.seen[2] + ref.seen[3]) == list(range(8)) and ref.seen[2:] != ref.seen[:2]
    first = _run(tiny_model_dir, rows_file, tmp_path, **{"trainer.total_epochs": 1, "trainer.save_freq": 2})
    assert first.seen == ref.seen[:2] and first.global_step == 2
    second = _run(tiny_model_dir, rows_file, tmp_path, **{"trainer.total_epochs": 2, "trainer.save_freq": 2})
    assert second.seen == ref.seen[2:], "epoch 2 after resume saw other prompts or another order"
    assert second.global_step == 4 and second.epoch == 1
    want, got = read_metrics(ref_dir), read_metrics(tmp_path)
    assert sorted(got) == [1, 2, 3, 4]
    for step in (3, 4):
        assert got[step]["training/epoch"] == 1.0 and got[step]["training/global_step"] == float(step)
        assert _stable(got[step]) == _stable(want[step]), step
    assert want[3]["actor/grad_norm"] > 0, "no update happened: the weight comparison below would be vacuous"
    a, b = _weights(ref_dir, 4), _weights(tmp_path, 4)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_b32_same_seed_same_order_other_seed_other_order(uninterrupted, tiny_model_dir, rows_file, tmp_path):
    """B32 (last bullet): two fresh runs with one seed see the same prompts in the same order from
    step 1; another ``data.seed`` gives another order."""
    ref, _ = uninterrupted
    again = _run(tiny_model_dir, rows_file, tmp_path / "same", **{"trainer.total_epochs": 1})
    assert again.seen == ref.seen[:2]
    other = _run(tiny_model_dir, rows_file, tmp_path / "other", **{"trainer.total_epochs": 1, "data.seed": 2})
    assert sorted(other.seen[0] + other.seen[1]) == list(range(8))
    assert other.seen != again.seen


def test_truncated_checkpoint_explicit_path_fails_auto_falls_back(tiny_model_dir, rows_file, tmp_path, caplog):
    """An explicitly requested truncated checkpoint is a clear `CheckpointError`; ``auto`` warns,
    resumes from the previous complete checkpoint and retrains the lost step identically."""
    _run(tiny_model_dir, rows_file, tmp_path, **{"trainer.total_epochs": 1, "trainer.save_freq": 1})
    before = read_metrics(tmp_path)
    lost = tmp_path / "ckpt" / "global_step_2"
    weights_before = _weights(tmp_path, 2)
    target = lost / "actor" / "model.safetensors"
    target.write_bytes(target.read_bytes()[:1000])
    longer = {"trainer.total_epochs": 2, "trainer.save_freq": 1}
    with pytest.raises(CheckpointError, match="truncated"):
        _run(
            tiny_model_dir,
            rows_file,
            tmp_path,
            **longer,
            **{"trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(lost)},
        )
    with caplog.at_level(logging.WARNING, logger="verl.run.checkpoint"):
        resumed = _run(tiny_model_dir, rows_file, tmp_path, **longer)
    assert any("global_step_2" in r.getMessage() and "truncated" in r.getMessage() for r in caplog.records)
    assert len(resumed.seen) == 3 and resumed.global_step == 4
    after = read_metrics(tmp_path)
    assert _stable(after[2]) == _stable(before[2]), "the retrained step 2 differs from the lost one"
    rebuilt = _weights(tmp_path, 2)
    assert all(torch.equal(rebuilt[k], weights_before[k]) for k in weights_before)
