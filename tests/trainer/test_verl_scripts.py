"""verl's example scripts (examples/verl_scripts/) run one step on CPU with a tiny model.

Only what verl's README says to change per machine is set (environment variables of the
scripts): model and data paths, GPU count, sizes, total_training_steps, logger and rollout.name.
Every script must train one step, or stop with the one-line "not supported yet" error of a
named feature; none may hit "unknown key".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "examples" / "verl_scripts"
SHARED = Path(os.environ.get("VERL_SHARED_DIR", ROOT.parent / "shared"))
ROWS = 12


@pytest.fixture(scope="session")
def verl_script_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """GSM8K and MATH-500 rows in verl's parquet layout (``verl prepare``), train and test."""
    from verl.data.prepare import convert_file, write_parquet

    root = tmp_path_factory.mktemp("verl_script_data")
    out = {}
    for task, name, key in (("gsm8k", "gsm8k", "GSM8K"), ("math500", "math", "MATH")):
        source = SHARED / "data" / task / "test.jsonl"
        if not source.is_file():
            pytest.skip(f"{source} not available")
        for split in ("train", "test"):
            rows = convert_file(task, source, split)
            rows = rows[:ROWS] if split == "train" else rows[ROWS : 2 * ROWS]
            path = root / name / f"{split}.parquet"
            write_parquet(rows, path)
            out[f"{key}_{'TRAIN' if split == 'train' else 'TEST'}"] = str(path)
    return out


def _env(model_dir: Path, data: dict[str, str], **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(data)
    env.update(
        {
            "PYTHON": sys.executable,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "MODEL_PATH": str(model_dir),
            "RM_PATH": str(model_dir),
            "NGPUS": "1",
            "NNODES": "1",
            "ROLLOUT_TP": "1",
            "SP_SIZE": "1",
            "TRAIN_BATCH_SIZE": "2",
            "GEN_BATCH_SIZE": "4",
            "MINI_BATCH_SIZE": "2",
            "MICRO_BATCH_SIZE": "2",
            "MAX_PROMPT_LENGTH": "1024",
            "MAX_RESPONSE_LENGTH": "8",
            "OVERLONG_BUFFER_LEN": "4",
            "ROLLOUT_N": "2",
            "MAX_TOKEN_LEN": "4096",
            "TOTAL_TRAINING_STEPS": "1",
            "LOGGER": '["console"]',
            "ROLLOUT_NAME": "hf",
            "TRAIN_FILES": f"['{data['GSM8K_TRAIN']}', '{data['MATH_TRAIN']}']",
            "VAL_FILES": f"['{data['GSM8K_TEST']}', '{data['MATH_TEST']}']",
        }
    )
    env.update(extra)
    return env


def _run(script: str, model_dir: Path, data: dict[str, str], cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env=_env(model_dir, data, **extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


# DAPO keeps only groups whose accuracy varies: a random tiny model never solves GSM8K, so the
# DAPO run uses the built-in task and its warm-started model (~27% accuracy), 4 samples a prompt
PER_SCRIPT = {
    "dapo.sh": {
        "MODEL_PATH": "builtin://tiny-arithmetic",
        "TRAIN_FILES": "builtin://arithmetic/train",
        "VAL_FILES": "builtin://arithmetic/test",
        "MAX_PROMPT_LENGTH": "16",
        "ROLLOUT_N": "4",
    }
}

SCRIPT_NAMES = [
    "grpo_math.sh",
    "grpo_lora.sh",
    "ppo_critic.sh",
    "ppo_reward_model.sh",
    "dapo.sh",
    "reinforce_plus_plus.sh",
    "rloo.sh",
    "remax.sh",
    "gspo.sh",
]


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_verl_script_trains_one_step(script, tiny_model_dir, verl_script_data, tmp_path):
    proc = _run(script, tiny_model_dir, verl_script_data, tmp_path, **PER_SCRIPT.get(script, {}))
    out = proc.stdout + proc.stderr
    assert "unknown key" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert "step:1 " in out or "training/global_step:1" in out or "step 1" in out, out[-3000:]


@pytest.mark.e2e
@pytest.mark.ray
def test_dapo_trains_one_step_with_ulysses_sequence_parallel_2(tiny_model_dir, verl_script_data, tmp_path):
    """verl's DAPO recipe at ulysses_sequence_parallel_size=2 on 2 Ray workers (actor and reference
    split along the sequence; gradient checkpointing, dynamic batch sizes and FSDP2 offload as the
    recipe sets them)."""
    proc = _run("dapo.sh", tiny_model_dir, verl_script_data, tmp_path, **PER_SCRIPT["dapo.sh"], SP_SIZE="2", NGPUS="2")
    out = proc.stdout + proc.stderr
    assert "unknown key" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert "step:1 " in out or "training/global_step:1" in out or "step 1" in out, out[-3000:]


@pytest.mark.e2e
def test_dapo_with_sp_not_dividing_the_world_stops_with_one_line(tiny_model_dir, verl_script_data, tmp_path):
    proc = _run("dapo.sh", tiny_model_dir, verl_script_data, tmp_path, SP_SIZE="8")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = next(ln for ln in out.splitlines() if "ulysses_sequence_parallel_size=8" in ln)
    assert "must divide the world size 1" in line
    assert "unknown key" not in out


def test_every_key_the_scripts_set_is_a_verl_reference_key():
    """The scripts set verl's keys only (none of our own), so 'unknown key' can never be ours to blame."""
    import re

    reference = set((ROOT / "tests" / "config" / "data" / "verl_ppo_trainer_keys.txt").read_text().split())
    for script in SCRIPT_NAMES:
        keys = re.findall(r"^\s+\+?([a-z_]+(?:\.[a-z_0-9]+)+)=", (SCRIPTS / script).read_text(), re.M)
        assert keys, script
        extra = [
            k
            for k in keys
            if k not in reference
            and not k.startswith("reward_model.reward_kwargs.")
            and k
            not in (
                "data.gen_batch_size",
                "algorithm.filter_groups.enable",
                "algorithm.filter_groups.max_num_gen_batches",
                "algorithm.filter_groups.metric",
            )
        ]
        assert extra == [], (script, extra)
