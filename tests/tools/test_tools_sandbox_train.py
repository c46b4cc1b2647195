"""``verl train calculator`` with the calculator answered by the code-interpreter sandbox and
secrets in the trainer's environment (``HF_TOKEN``, ``WANDB_API_KEY``, ``VERL_TEST_SECRET``):
every tool call first searches all the sandbox can see (its environment, every process's
``environ`` / ``cmdline``, its files) for them and finds nothing; no tool output, dumped
trajectory or metric holds them. Without bubblewrap the run stops with one line naming the
package, or, with ``unsafe_no_isolation: true``, runs and says so once as its first log line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.tools.sandbox_tool_helpers import SECRET_PREFIX
from verl.tools.isolation import IsolationError, check_isolation

try:
    check_isolation()
    _WHY = ""
except IsolationError as e:
    _WHY = str(e)

ROOT = Path(__file__).resolve().parents[2]


def _train(tmp_path: Path, tool_config: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``verl train calculator`` for one step of 4 prompts x 4 trajectories with ``tool_config``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        f"tools:\n  - class_name: tests.tools.sandbox_tool_helpers.SandboxCalculatorTool\n    config: {tool_config}\n"
    )
    env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "verl"),
            "train",
            "calculator",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "data.val_files=[]",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
            f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )


@pytest.mark.e2e
@pytest.mark.skipif(bool(_WHY), reason=f"no OS isolation here: {_WHY}")
def test_verl_train_code_tool_never_sees_the_trainers_secrets(tmp_path):
    secret = f"{SECRET_PREFIX}{uuid.uuid4().hex}"
    proc = _train(
        tmp_path,
        "{probe: true, timeout_s: 20, warm_workers: 2}",
        {"VERL_TEST_SECRET": secret, "HF_TOKEN": secret, "WANDB_API_KEY": secret},
    )
    assert proc.returncode == 0, proc.stdout[-5000:]
    dumped = "".join(p.read_text() for p in sorted((tmp_path / "rollouts").glob("*.jsonl")))
    probes = [line for line in dumped.replace("\\n", "\n").splitlines() if "probe-hits=" in line]
    assert probes, "the model never called the tool: nothing was probed"
    # (without bubblewrap, unsafe_no_isolation: probe-hits=9: the trainer's /proc/<pid>/environ and more)
    assert all("probe-hits=0" in line for line in probes), probes[:3]
    metrics = (tmp_path / "out" / "metrics.jsonl").read_text()
    assert json.loads(metrics.splitlines()[-1])["tool_call_counts/max"] >= 1
    for text in (dumped, metrics, proc.stdout):
        assert secret not in text


# a whole training run without the sandbox; the secrets test keeps the sandboxed run in the default suite
@pytest.mark.slow
@pytest.mark.e2e
def test_without_bubblewrap_verl_train_stops_in_one_line_or_runs_unsafe_and_says_so(tmp_path):
    no_bwrap = {"PATH": str(Path(sys.executable).parent)}  # the venv's scripts only: no bwrap, no prlimit
    proc = _train(tmp_path / "refused", "{timeout_s: 20}", no_bwrap)
    assert proc.returncode != 0 and proc.stdout.strip().count("\n") == 0, proc.stdout[-3000:]
    assert "IsolationError: bubblewrap (`bwrap`) is not installed: install the `bubblewrap` package" in proc.stdout
    proc = _train(tmp_path / "unsafe", "{unsafe_no_isolation: true, timeout_s: 20}", no_bwrap)
    assert proc.returncode == 0, proc.stdout[-5000:]
    lines = proc.stdout.splitlines()
    marks = [i for i, line in enumerate(lines) if "UNSAFE: unsafe_no_isolation=true" in line]
    assert marks == [0], lines[:5]  # once, the first line of the run's log
