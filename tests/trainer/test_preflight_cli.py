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
ROW = {"data_source": "builtin/arithmetic", "prompt": [{"role": "user", "content": "1+1="}],
       "reward_model": {"ground_truth": "2"}}


def _run(overrides: list[str], *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *extra], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode != 0, proc.stdout[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith(("WARNING", "INFO"))]
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
        "unknown_source": ({"data.train_files": str(unknown), "custom_reward_function.path": "null"},
                           ("pre-flight check failed", "'my/source'")),
        "missing_name": ({"custom_reward_function.name": "nope"}, ("reward function error", "'nope' not found")),
        "wrong_signature": ({"custom_reward_function.path": str(wrong_sig)}, ("reward function error", "compute_score(text)")),
        "big_vocab": ({"data.tokenizer": str(shared / "tokenizers" / "gpt2")}, ("model error", "50257 tokens")),
        "short_context": ({"actor_rollout_ref.model.path": str(short)}, ("model error", "context of 16")),
    }


@pytest.mark.parametrize("case", ["file_ckpt_path", "non_utf8", "unknown_source", "missing_name", "wrong_signature",
                                  "big_vocab", "short_context"])
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
