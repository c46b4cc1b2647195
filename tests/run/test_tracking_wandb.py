"""``trainer.logger=['console','wandb']`` (verl's scripts) without credentials: an offline W&B run, never a stop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from verl.run.tracking import Tracking, wandb_credentials

# a closed local port: a wandb that tried the network would fail or hang instead of logging
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", UNREACHABLE)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "2")
    import wandb

    wandb.teardown()  # wandb reads its environment once per process (its setup singleton)
    yield tmp_path / "wb"
    wandb.teardown()


def _offline_run(wandb_dir: Path, online_tried: bool = False) -> Path:
    runs = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    assert len(list((wandb_dir / "wandb").glob("run-*"))) == int(online_tried)  # the failed online start's log
    return runs[0]


def _log_two_steps(out: Path) -> None:
    import wandb

    tracker = Tracking(
        ["console", "wandb"], out, project_name="p", experiment_name="e", config={"trainer": {"seed": 1}}
    )
    tracker.log({"critic/score/mean": 0.25, "actor/pg_loss": -1.5}, step=1)
    tracker.log({"critic/score/mean": 0.75}, step=2)
    tracker.close()
    wandb.teardown()  # waits for wandb's service process to write out the run's records


def test_no_credentials_logs_offline_once(no_credentials: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert not wandb_credentials()
    _log_two_steps(tmp_path / "out")
    run = _offline_run(no_credentials)
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wandb:")]
    assert notes == [
        f"wandb: no W&B credentials (WANDB_API_KEY, ~/.netrc): logging offline to {run}; "
        f"upload it later with `wandb sync {run}`"
    ]
    data = next(run.glob("run-*.wandb")).read_bytes()  # the run's records: history rows hold the metrics
    assert b"critic/score/mean" in data and b"actor/pg_loss" in data and b"0.75" in data and b"-1.5" in data
    assert UNREACHABLE.encode() not in (no_credentials / "wandb" / "debug-internal.log").read_bytes()


def test_netrc_entry_counts_as_credentials(no_credentials: Path, tmp_path: Path) -> None:
    netrc = tmp_path / "home" / ".netrc"
    netrc.parent.mkdir(parents=True)
    netrc.write_text(f"machine 127.0.0.1\n  login user\n  password {'a' * 40}\n")
    netrc.chmod(0o600)
    assert wandb_credentials()


def test_failed_online_start_falls_back_to_offline(
    no_credentials: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)  # a key, but the server cannot be reached
    _log_two_steps(tmp_path / "out")
    run = _offline_run(no_credentials, online_tried=True)
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wandb:")]
    assert len(notes) == 1 and notes[0].startswith("wandb: online start failed (") and f"`wandb sync {run}`" in notes[0]


@pytest.mark.e2e
def test_one_rl_step_with_verls_logger_setting(no_credentials: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from run_helpers import tiny_run_overrides

    from verl.config import load_config
    from verl.trainer.ppo.trainer import RLTrainer

    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path / "run",
            **{"trainer.total_training_steps": 1, "trainer.logger": "['console','wandb']"},
        ),
    )
    history = RLTrainer(config=cfg).fit()
    assert [h["step"] for h in history] == [1]
    import wandb

    wandb.teardown()  # waits for wandb's service process to write out the run's records
    assert b"actor/pg_loss" in next(_offline_run(no_credentials).glob("run-*.wandb")).read_bytes()
