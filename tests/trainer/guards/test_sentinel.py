"""Divergence sentinel: an injected advantage spike trips it, `verl replay` reproduces the step
bit for bit on CPU, and rollback continues the run from the last good checkpoint."""

from __future__ import annotations

import json
import math

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.commands.replay import main as replay_main
from verl.commands.replay import format_report, replay_bundle
from verl.trainer.guards.sentinel import batch_digest

pytestmark = pytest.mark.e2e  # whole training loops (each ~10 s of CPU)

SPIKE = 1e4


def _spiking(monkeypatch, at_step: int, once: bool = True) -> list[int]:
    """Multiply the advantages of step ``at_step`` by SPIKE (the first time only when ``once``)."""
    original = RLTrainer._compute_advantage
    fired: list[int] = []

    def spiked(self, batch):
        out = original(self, batch)
        if self.global_step + 1 == at_step and not (once and fired):
            batch.batch["advantages"] = batch.batch["advantages"] * SPIKE
            fired.append(at_step)
        return out

    monkeypatch.setattr(RLTrainer, "_compute_advantage", spiked)
    return fired


def _config(model_dir, run_dir, **extra):
    base = {
        "trainer.total_training_steps": 6,
        "trainer.save_freq": 2,
        "trainer.sentinel.warmup_steps": 2,
        "actor_rollout_ref.actor.optim.lr": 1e-4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
    }  # 2 optimizer steps: the second's ratio != 1, pg_loss != 0
    base.update(extra)
    return load_config(None, tiny_run_overrides(model_dir, run_dir, **base))


def test_advantage_spike_trips_and_replay_is_bit_exact(tiny_model_dir, tmp_path, monkeypatch, capsys):
    _spiking(monkeypatch, at_step=5)
    history = RLTrainer(config=_config(tiny_model_dir, tmp_path)).fit()
    rows = {r["step"]: r for r in history}
    assert [s for s, r in rows.items() if r["sentinel/tripped"] == 1.0] == [5]
    assert rows[5]["sentinel/grad_norm_z"] > 6
    out = capsys.readouterr().out
    assert "SENTINEL step 5 tripped: grad_norm:" in out
    bundle = tmp_path / "out" / "incidents" / "incident_step_5"
    info = json.loads((bundle / "incident.json").read_text())
    assert info["checkpoint"].endswith("global_step_4") and info["replay_steps"] == [5] and info["exact"]
    assert (bundle / "config.yaml").is_file()
    report = replay_bundle(bundle)
    row = report.rows[-1]
    assert row["replayed"]["actor/grad_norm"] == rows[5]["actor/grad_norm"]  # bit-exact: ==, not approx
    assert row["replayed"]["actor/pg_loss"] == rows[5]["actor/pg_loss"] != 0.0
    assert report.reproduced and rows[5]["actor/grad_norm"] > 100 * rows[4]["actor/grad_norm"]
    assert format_report(report).endswith("bit-exact: yes")


@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_replay_detects_a_bundle_that_does_not_reproduce(tiny_model_dir, tmp_path, monkeypatch, capsys):
    _spiking(monkeypatch, at_step=3)
    RLTrainer(
        config=_config(
            tiny_model_dir,
            tmp_path,
            **{"trainer.total_training_steps": 3, "trainer.save_freq": -1, "trainer.sentinel.warmup_steps": 1},
        )
    ).fit()
    bundle = tmp_path / "out" / "incidents" / "incident_step_3"
    info = json.loads((bundle / "incident.json").read_text())
    assert (
        info["checkpoint"] is None and info["replay_steps"] == [1, 2, 3] and info["exact"]
    )  # from the initial weights
    # a different learning rate changes steps 2 and 3: the replay must say so and exit 1
    assert replay_main([str(bundle), "actor_rollout_ref.actor.optim.lr=1e-2"]) == 1
    assert "bit-exact: no" in capsys.readouterr().out


def test_rollback_restores_last_good_checkpoint_and_skips_the_batch(tiny_model_dir, tmp_path, monkeypatch, capsys):
    fired = _spiking(monkeypatch, at_step=5)
    seen: list[str] = []
    original = RLTrainer.train_step

    def recording(self, batch_dict):
        seen.append(batch_digest(batch_dict))
        return original(self, batch_dict)

    monkeypatch.setattr(RLTrainer, "train_step", recording)
    cfg = _config(tiny_model_dir, tmp_path, **{"trainer.sentinel.action": "rollback"})
    trainer = RLTrainer(config=cfg)
    history = trainer.fit()
    out = capsys.readouterr().out
    assert fired == [5] and trainer.global_step == 6
    assert "rolling back to" in out and f"Resumed from {tmp_path / 'ckpt' / 'global_step_4'}" in out
    assert [r["step"] for r in history] == [1, 2, 3, 4, 5, 6]  # the tripped step 5 is re-done, not kept
    assert all(r["sentinel/tripped"] == 0.0 and math.isfinite(r["actor/grad_norm"]) for r in history)
    # calls: steps 1-4, the tripping batch (5), then after the restore: that batch again (skipped), two new ones
    assert len(seen) == 8 and seen[5] == seen[4] and seen[6] != seen[4]
    assert "skipping the batch that tripped" in out
    rows = read_metrics(tmp_path)
    assert sorted(rows) == [1, 2, 3, 4, 5, 6] and rows[5]["sentinel/tripped"] == 0.0
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.resume_from_path is None  # the user's settings are back
