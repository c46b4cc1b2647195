"""Exact resume after SIGKILL (issue 4, known_faults B32): mid-step and mid-save.

The killed run is relaunched with the same command (``resume_mode=auto``); every later step's
metrics (losses, rewards, grad norm, lr) and the final weights must equal an uninterrupted
run's exactly on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from run_helpers import read_metrics, tiny_run_overrides
from safetensors.torch import load_file

pytestmark = pytest.mark.e2e  # whole training loops (and subprocesses)

KILL_MID_STEP = textwrap.dedent("""
    import os, signal, sys
    from verl.trainer.ppo.trainer import RLTrainer
    original = RLTrainer._compute_advantage
    def killer(self, *args, **kwargs):
        if self.global_step == 2:  # inside step 3, after generation and reward
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)
    RLTrainer._compute_advantage = killer
    from verl.commands.train import main
    sys.exit(main(sys.argv[1:]))
""")

KILL_MID_SAVE = textwrap.dedent("""
    import functools, os, signal, sys
    from verl.workers.fsdp_workers import ActorRolloutRefWorker
    original = ActorRolloutRefWorker.save_checkpoint
    @functools.wraps(original)  # keeps the @register dispatch mode
    def killer(self, out_dir):
        original(self, out_dir)
        if "global_step_3" in out_dir:  # actor written, trainer state and manifest not yet
            os.kill(os.getpid(), signal.SIGKILL)
    ActorRolloutRefWorker.save_checkpoint = killer
    from verl.commands.train import main
    sys.exit(main(sys.argv[1:]))
""")

PLAIN = "import sys\nfrom verl.trainer.main_ppo import main\nsys.exit(main(sys.argv[1:]))\n"
VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


def _launch(script: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-c", script, *overrides], capture_output=True, text=True, env=env, timeout=600
    )


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(VOLATILE)}


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    ov = tiny_run_overrides(tiny_model_dir, run_dir, **_extra())
    proc = _launch(PLAIN, ov)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def _extra() -> dict:
    return {
        "trainer.total_training_steps": 4,
        "trainer.save_freq": 1,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": 4,
        "data.shuffle": True,
        "data.seed": 7,
        "algorithm.adv_estimator": "gae",
        "actor_rollout_ref.rollout.n": 1,
        "critic.optim.lr": 1e-3,
        "algorithm.use_kl_in_reward": True,
        "algorithm.kl_ctrl.type": "adaptive",
    }


@pytest.mark.parametrize("killer", [KILL_MID_STEP, KILL_MID_SAVE], ids=["mid_step", "mid_save"])
def test_sigkill_then_rerun_equals_uninterrupted(reference, tiny_model_dir, tmp_path, killer):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **_extra())
    crashed = _launch(killer, ov)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "2"
    rerun = _launch(PLAIN, ov)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Resumed from" in rerun.stdout and "global_step_2" in rerun.stdout
    ref, got = read_metrics(reference), read_metrics(tmp_path)
    for step in (3, 4):
        assert _stable(got[step]) == _stable(ref[step]), step
    assert ref[3]["actor/lr"] == pytest.approx(7.5e-4) and ref[4]["actor/lr"] == pytest.approx(1e-3)
    for role in ("actor", "critic"):
        a = load_file(str(reference / "ckpt" / "global_step_4" / role / "model.safetensors"))
        b = load_file(str(tmp_path / "ckpt" / "global_step_4" / role / "model.safetensors"))
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), role
