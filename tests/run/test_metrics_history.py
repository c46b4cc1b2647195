"""Metrics history never loses a row (issue 12.5).

The step's row is fsync'ed into ``metrics.jsonl`` before its checkpoint is published, and the
resume's rewrite goes through a temporary file + fsync + rename. Two kills, each followed by a
plain relaunch: ``metrics.jsonl`` must equal the uninterrupted run's file row for row (volatile
timing keys aside).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from run_helpers import tiny_run_overrides

from verl.run.tracking import Tracking

pytestmark = pytest.mark.e2e

PLAIN = "import sys\nfrom verl.trainer.main_ppo import main\nsys.exit(main(sys.argv[1:]))\n"
KILL_AFTER_PUBLISH = textwrap.dedent("""
    import os, signal, sys
    from verl.trainer.ppo.trainer import RLTrainer
    original = RLTrainer.save_checkpoint
    def killer(self):
        path = original(self)
        if self.global_step == 2:  # global_step_2 and the latest pointer are published
            os.kill(os.getpid(), signal.SIGKILL)
        return path
    RLTrainer.save_checkpoint = killer
    from verl.commands.train import main
    sys.exit(main(sys.argv[1:]))
""")
KILL_MID_STEP_4 = textwrap.dedent("""
    import os, signal, sys
    from verl.trainer.ppo.trainer import RLTrainer
    original = RLTrainer._compute_advantage
    def killer(self, *args, **kwargs):
        if self.global_step == 3:  # inside step 4: rows 1-3 written, latest checkpoint is step 2
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)
    RLTrainer._compute_advantage = killer
    from verl.commands.train import main
    sys.exit(main(sys.argv[1:]))
""")
KILL_IN_REWRITE = textwrap.dedent("""
    import os, signal, sys
    import verl.run.tracking as tracking
    def killer(src, dst):  # the new file is written and fsync'ed, not yet renamed over metrics.jsonl
        os.kill(os.getpid(), signal.SIGKILL)
    tracking.os.replace = killer
    from verl.commands.train import main
    sys.exit(main(sys.argv[1:]))
""")
VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


def _launch(script: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-c", script, *overrides], capture_output=True, text=True, env=env, timeout=600
    )


def _rows(run_dir) -> list[dict]:
    lines = (run_dir / "out" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith(VOLATILE)} for x in lines]


def _extra(save_freq: int) -> dict:
    return {"trainer.total_training_steps": 4, "trainer.save_freq": save_freq, "data.shuffle": True, "data.seed": 7}


@pytest.fixture(scope="module")
def references(tiny_model_dir, tmp_path_factory):
    out = {}
    for save_freq in (1, 2):
        run_dir = tmp_path_factory.mktemp(f"reference{save_freq}")
        proc = _launch(PLAIN, tiny_run_overrides(tiny_model_dir, run_dir, **_extra(save_freq)))
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[save_freq] = _rows(run_dir)
    assert [r["step"] for r in out[1]] == [1, 2, 3, 4]
    return out


def test_kill_right_after_checkpoint_publish(references, tiny_model_dir, tmp_path):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **_extra(1))
    crashed = _launch(KILL_AFTER_PUBLISH, ov)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert [r["step"] for r in _rows(tmp_path)] == [1, 2]  # row 2 was durable before global_step_2
    rerun = _launch(PLAIN, ov)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "global_step_2" in rerun.stdout
    assert _rows(tmp_path) == references[1]


def test_kill_during_metrics_rewrite(references, tiny_model_dir, tmp_path):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **_extra(2))
    assert _launch(KILL_MID_STEP_4, ov).returncode == -9
    before = (tmp_path / "out" / "metrics.jsonl").read_text()
    assert [r["step"] for r in _rows(tmp_path)] == [1, 2, 3]
    crashed = _launch(KILL_IN_REWRITE, ov)  # the resume is killed inside the rewrite
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == before  # untouched, never emptied
    rerun = _launch(PLAIN, ov)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _rows(tmp_path) == references[2]


def test_rewrite_drops_later_and_torn_rows(tmp_path):
    t = Tracking(["jsonl"], tmp_path)
    for step in (1, 2, 3):
        t.log({"x": float(step)}, step=step)
    t.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "x": 4.0')  # torn by a kill mid-append
    t = Tracking(["jsonl"], tmp_path)
    t.keep_until(2)
    t.log({"x": 3.5}, step=3)
    t.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "x": 1.0}, {"step": 2, "x": 2.0}, {"step": 3, "x": 3.5}]
    assert not (tmp_path / ".metrics.jsonl.tmp").exists()
