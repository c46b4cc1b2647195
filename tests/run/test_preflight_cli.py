"""One line for every user error (issue 12.3), through verl's own entry point.

Each minimal bad input exits non-zero with one line on stderr naming the cause, no traceback,
and — where the cause is knowable before the first step — before any step ran (no metrics row,
no checkpoint). ``--debug`` / ``VERL_DEBUG=1`` bring the traceback back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import tiny_run_overrides

pytestmark = pytest.mark.e2e
ROW = {
    "data_source": "builtin/arithmetic",
    "prompt": [{"role": "user", "content": "1+1="}],
    "reward_model": {"ground_truth": "2"},
}


def _run(overrides: list[str], *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode != 0, proc.stdout[-2000:]
    # the error is one line; progress bars and logged warnings (e.g. the pad-token choice) are not errors
    lines = [x for x in proc.stderr.splitlines() if x.startswith("verl ")]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _no_step_ran(run_dir: Path) -> None:
    metrics = run_dir / "out" / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text() == ""
    assert not list((run_dir / "ckpt").glob("global_step_*")) if (run_dir / "ckpt").is_dir() else True


def _bad_inputs(tiny_model_dir: Path, tmp: Path, shared: Path) -> dict[str, tuple[dict, tuple[str, ...]]]:
    (tmp / "ckpt_file").write_text("not a directory")
    bad_data = tmp / "latin1.jsonl"
    bad_data.write_bytes(json.dumps(ROW).encode() + b"\n" + b'{"data_source": "caf\xe9"}\n')
    unknown = tmp / "unknown.jsonl"
    unknown.write_text(json.dumps({**ROW, "data_source": "my/source"}) + "\n")
    wrong_sig = tmp / "wrong_sig.py"
    wrong_sig.write_text("def compute_score(text):\n    return 1.0\n")
    short = tmp / "short_model"
    shutil.copytree(tiny_model_dir, short)
    cfg = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 16}))
    return {
        "file_ckpt_path": ({"trainer.default_local_dir": str(tmp / "ckpt_file")}, ("disk error", "not a directory")),
        "non_utf8": ({"data.train_files": str(bad_data)}, ("data error", "line 2", "UTF-8")),
        "unknown_source": (
            {"data.train_files": str(unknown), "custom_reward_function.path": "null"},
            ("pre-flight check failed", "'my/source'"),
        ),
        "missing_name": ({"custom_reward_function.name": "nope"}, ("reward function error", "'nope' not found")),
        "wrong_signature": (
            {"custom_reward_function.path": str(wrong_sig)},
            ("reward function error", "compute_score(text)"),
        ),
        "big_vocab": ({"data.tokenizer": str(shared / "tokenizers" / "gpt2")}, ("model error", "50257 tokens")),
        "short_context": ({"actor_rollout_ref.model.path": str(short)}, ("model error", "context of 16")),
    }


@pytest.mark.parametrize(
    "case",
    ["file_ckpt_path", "non_utf8", "unknown_source", "missing_name", "wrong_signature", "big_vocab", "short_context"],
)
def test_bad_input_is_one_line_before_the_first_step(case, tiny_model_dir, tmp_path, shared_dir):
    extra, needles = _bad_inputs(tiny_model_dir, tmp_path, shared_dir)[case]
    proc = _run(tiny_run_overrides(tiny_model_dir, tmp_path, **{"trainer.save_freq": 1, **extra}))
    line = _one_line(proc, *needles)
    assert line.startswith("verl train: ")
    _no_step_ran(tmp_path)


def test_debug_shows_the_traceback(tiny_model_dir, tmp_path):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **{"custom_reward_function.name": "nope"})
    proc = _run(ov, "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "RewardFunctionNotFound" in proc.stderr
    proc = _run(ov, env={"VERL_DEBUG": "1"})
    assert "Traceback" in proc.stderr


DISK_FULL = """
import sys
import safetensors.torch
from safetensors import SafetensorError
def full(*args, **kwargs):
    raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, \
message: "No space left on device" })')
safetensors.torch.save_file = full
from verl.commands.train import main
sys.exit(main(sys.argv[1:]))
"""


def test_full_disk_during_save_is_one_line_and_keeps_the_row(tiny_model_dir, tmp_path):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **{"trainer.save_freq": 1})
    proc = subprocess.run([sys.executable, "-c", DISK_FULL, *ov], capture_output=True, text=True, timeout=600)
    _one_line(
        proc,
        "verl train: disk error: saving a checkpoint under",
        "No space left on device",
        "previous checkpoint is intact",
    )
    assert [json.loads(x)["step"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()] == [1]
    assert not list((tmp_path / "ckpt").glob("global_step_*"))
    assert not (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").exists()


def test_checkpoint_file_that_is_not_weights_is_one_error(tiny_model_dir, tmp_path):
    import hashlib

    from verl.config import load_config
    from verl.trainer import RLTrainer
    from verl.utils.errors import CheckpointLoadError

    RLTrainer(config=load_config(None, tiny_run_overrides(tiny_model_dir, tmp_path, **{"trainer.save_freq": 2}))).fit()
    ckpt = tmp_path / "ckpt" / "global_step_2"
    (ckpt / "trainer_state.pt").write_bytes(b"\x80\x04 this is not a torch file")
    files = {
        str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(ckpt.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (ckpt / "manifest.json").write_text(json.dumps({"step": 2, "files": files}))
    more = load_config(None, tiny_run_overrides(tiny_model_dir, tmp_path, **{"trainer.total_training_steps": 3}))
    with pytest.raises(
        CheckpointLoadError,
        match=r"cannot load the trainer state .*global_step_2/trainer_state\.pt .*"
        r"Unsupported operand.*damaged",
    ) as info:
        RLTrainer(config=more).fit()
    assert "\n" not in str(info.value)
