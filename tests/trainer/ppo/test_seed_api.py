"""The product documents' API (seeds/000 §4.1, seeds/001 §2.1): scripts run as written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from run_helpers import tiny_run_overrides

pytestmark = pytest.mark.e2e  # whole training loops (and subprocesses)

SEED_SCRIPT = """\
from verl.trainer import RLTrainer
from verl.data import RLDataLoader
from verl.utils.config import load_config

config = load_config("configs/llama3_8b_ppo.yaml")
dataloader = RLDataLoader(config.data)
trainer = RLTrainer(
    config=config.trainer,
    dataloader=dataloader,
    model_config=config.model
)
trainer.train()
"""

SEED_YAML = """\
trainer:
  algorithm: ppo
  rollout_batch_size: 8
  num_rollout_workers: 2
  use_vllm: true
  use_flash_attn: true
  total_training_steps: 1
model:
  actor:
    model_name_or_path: {model}
    use_fsdp: true
    fsdp_config:
      sharding_strategy: FULL_SHARD
  reward_model:
    model_name_or_path: {model}
    device_map: auto
data:
  max_prompt_length: 24
  max_response_length: 8
"""


def test_minimal_training_script_runs_as_written(tiny_model_dir, tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "llama3_8b_ppo.yaml").write_text(SEED_YAML.format(model=tiny_model_dir))
    (tmp_path / "train_verl_minimal.py").write_text(SEED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "train_verl_minimal.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "outputs" / "verl" / "llama3_8b_ppo"  # experiment named after the config file
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "config.yaml").is_file()
    assert "critic/vf_loss" in (run_dir / "metrics.jsonl").read_text()  # ppo -> gae with a critic


def test_create_trainer_from_seed_dict(tiny_model_dir, tmp_path):
    from verl.trainer import create_trainer

    trainer = create_trainer(
        {
            "rollout": {"name": "hf", "multi_turn": False, "max_tokens": 6, "temperature": 0.7},
            "algorithm": "grpo",
            "model": {"path": str(tiny_model_dir)},
        },
        overrides=tuple(o for o in tiny_run_overrides(tiny_model_dir, tmp_path) if not o.startswith("algorithm.")),
    )
    cfg = trainer.config
    assert cfg.actor_rollout_ref.rollout.temperature == 0.7 and cfg.data.max_response_length == 6
    history = trainer.train()
    assert [h["step"] for h in history] == [1, 2]


def test_main_ppo_module_and_verl_train_take_the_same_config(tiny_model_dir, tmp_path):
    ov = tiny_run_overrides(tiny_model_dir, tmp_path, **{"trainer.total_training_steps": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *ov], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "actor_rollout_ref.actor.ppo_mini_batchsize=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "ppo_mini_batch_size" in bad.stderr and "Traceback" not in bad.stderr
