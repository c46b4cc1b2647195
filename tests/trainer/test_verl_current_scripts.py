"""verl's current example scripts (verbatim copies in examples/verl_scripts/current) train one step
on CPU, run as examples/verl_scripts/current/run_all.py runs them (tiny model, $HOME/data, hf rollout).

One script runs in the e2e tier; the whole list is slow (deselected by default; run_all.py records it
in examples/verl_scripts/current/results.json and the README's table).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

CURRENT = Path(__file__).resolve().parents[2] / "examples" / "verl_scripts" / "current"
SCRIPTS = sorted(p.name for p in CURRENT.glob("*.sh"))


def _runner():
    spec = importlib.util.spec_from_file_location("verl_run_all", CURRENT / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    run_all = _runner()
    if not (run_all.SHARED / "data" / "gsm8k" / "test.jsonl").is_file():
        pytest.skip("shared GSM8K / MATH data not available")
    root = tmp_path_factory.mktemp("verl_current_scripts")
    env = dict(os.environ)
    env.update(run_all.SIZES)
    model, home = str(run_all.make_model(root)), run_all.make_home(root)
    env.update(
        {
            "HOME": str(home),
            "MODEL_PATH": model,
            "REWARD_MODEL_PATH": model,
            "TRAIN_FILE": str(home / "data" / "gsm8k" / "train.parquet"),
            "TEST_FILE": str(home / "data" / "gsm8k" / "test.parquet"),
            "VAL_FILE": str(home / "data" / "math" / "test.parquet"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
            "PYTHONPATH": f"{run_all.ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "WANDB_MODE": "offline",
        }
    )
    return env


def _check(script: str, env: dict[str, str], tmp_path: Path) -> None:
    result = _runner().run_one(CURRENT / script, env, tmp_path, timeout=900)
    assert result["result"] == "pass", result


def test_the_list_has_at_least_15_scripts():
    assert len(SCRIPTS) >= 15


def test_the_async_entry_point_scripts_are_in_the_list():
    assert "experimental_one_step_off_policy__dapo_7b_math_fsdp2_4_12.sh" in SCRIPTS
    assert "experimental_fully_async_policy__dapo_7b_math_fsdp2_4_4.sh" in SCRIPTS


def test_a_script_without_args_forwarding_gets_python_shims_appending_the_overrides(tmp_path):
    run_all = _runner()
    script = CURRENT / "experimental_fully_async_policy__dapo_7b_math_fsdp2_4_4.sh"
    env = run_all.python_shim(script, {"PATH": "/usr/bin"}, tmp_path)
    assert env["PATH"] == f"{tmp_path / 'shim'}{os.pathsep}/usr/bin"
    shim = (tmp_path / "shim" / "python3").read_text()
    assert shim.startswith(f'#!/bin/sh\nexec {sys.executable} "$@" trainer.device=cpu ')
    assert shim.rstrip().endswith("actor_rollout_ref.actor.fsdp_config.fsdp_size=-1")
    assert "rollout.n_gpus_per_node=1" in shim and "async_training.require_batches=1" in shim
    forwarding = CURRENT / "gspo_trainer__run_qwen3_8b_fsdp.sh"
    assert run_all.python_shim(forwarding, {"PATH": "/usr/bin"}, tmp_path / "other") == {"PATH": "/usr/bin"}
    assert run_all.overrides_for(forwarding) == run_all.OVERRIDES


@pytest.mark.e2e
def test_one_current_verl_script_trains_one_step(script_env, tmp_path):
    _check("gspo_trainer__run_qwen3_8b_fsdp.sh", script_env, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_current_verl_script_trains_one_step(script, script_env, tmp_path):
    _check(script, script_env, tmp_path)
