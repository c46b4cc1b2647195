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
    env.update({"HOME": str(home), "MODEL_PATH": model, "REWARD_MODEL_PATH": model,
                "TRAIN_FILE": str(home / "data" / "gsm8k" / "train.parquet"),
                "TEST_FILE": str(home / "data" / "gsm8k" / "test.parquet"),
                "VAL_FILE": str(home / "data" / "math" / "test.parquet"),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
                "PYTHONPATH": f"{run_all.ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"})
    return env


def _check(script: str, env: dict[str, str], tmp_path: Path) -> None:
    result = _runner().run_one(CURRENT / script, env, tmp_path, timeout=900)
    assert result["result"] == "pass", result


def test_the_list_has_at_least_15_scripts():
    assert len(SCRIPTS) >= 15


@pytest.mark.e2e
def test_one_current_verl_script_trains_one_step(script_env, tmp_path):
    _check("gspo_trainer__run_qwen3_8b_fsdp.sh", script_env, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_current_verl_script_trains_one_step(script, script_env, tmp_path):
    _check(script, script_env, tmp_path)
