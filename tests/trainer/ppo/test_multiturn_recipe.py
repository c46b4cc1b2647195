"""verl's multi-turn recipe, run as verl users run it: ``examples/multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh``
(``python3 -m verl.trainer.main_ppo --config-path ... --config-name gsm8k_multiturn_grpo`` with
verl's YAMLs) for 1 step, with only model / data paths, sizes, GPU count and rollout.name=hf
changed; plus the Hydra entry's argument handling and the recipe YAMLs loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.trainer.ppo.multiturn_helpers import boosted_random_qwen
from verl.config import ConfigError, load_config
from verl.data.prepare import main as prepare_main
from verl.commands.train import hydra_config_args

REPO = Path(__file__).resolve().parents[3]
CONFIG_DIR = REPO / "examples" / "multiturn" / "config"


def test_hydra_arguments():
    assert hydra_config_args(["--config-path=/a", "--config-name", "x", "k=1"]) == ("/a/x.yaml", ["k=1"])
    assert hydra_config_args(["-cp", "/a", "-cn=y.yaml"]) == ("/a/y.yaml", [])
    assert hydra_config_args(["k=1"]) == (None, ["k=1"])
    with pytest.raises(ValueError, match="--config-name"):
        hydra_config_args(["--config-path", "/a"])


@pytest.mark.parametrize("name", ["gsm8k_multiturn_grpo", "gsm8k_multiturn_grpo_w_interaction"])
def test_recipe_yamls_load_with_verl_defaults(name):
    cfg = load_config(
        str(CONFIG_DIR / f"{name}.yaml"),
        [
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.actor.ppo_mini_batch_size=256",
            "actor_rollout_ref.rollout.multi_turn.tool_config_path="
            f"{CONFIG_DIR / 'tool_config' / 'gsm8k_tool_config.yaml'}",
        ],
    )
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    assert mt.enable and cfg.data.return_raw_chat and cfg.data.max_response_length == 1024
    assert (mt.max_assistant_turns, mt.max_user_turns) == ((5, None) if name == "gsm8k_multiturn_grpo" else (None, 5))
    # everything else is verl's default (ppo_trainer)
    assert cfg.algorithm.adv_estimator == "gae" and cfg.actor_rollout_ref.actor.clip_ratio == 0.2


def test_recipe_tool_and_interaction_configs_load():
    from verl.interactions import Gsm8kInteraction, load_interactions
    from verl.tools import load_tools
    from verl.tools.gsm8k_tool import Gsm8kTool

    tools = load_tools(CONFIG_DIR / "tool_config" / "gsm8k_tool_config.yaml")
    assert isinstance(tools["calc_gsm8k_reward"], Gsm8kTool)
    interactions = load_interactions(CONFIG_DIR / "interaction_config" / "gsm8k_interaction_config.yaml")
    assert isinstance(interactions["gsm8k"], Gsm8kInteraction)


def test_other_hydra_settings_are_refused(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("hydra:\n  run:\n    dir: out\ndefaults:\n  - ppo_trainer\n")
    with pytest.raises(ConfigError, match="`hydra.run` is not supported yet"):
        load_config(str(f))


@pytest.mark.e2e
def test_verl_recipe_one_step(shared_dir, tmp_path):
    model = boosted_random_qwen(shared_dir, tmp_path / "model")
    assert (
        prepare_main(
            [
                "gsm8k",
                "--input",
                str(shared_dir / "data" / "gsm8k" / "test.jsonl"),
                "--out",
                str(tmp_path / "data"),
                "--multiturn",
            ]
        )
        == 0
    )
    rows = pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()
    pq.write_table(pq.read_table(tmp_path / "data" / "test.parquet").slice(0, 2), tmp_path / "val.parquet")
    assert rows[0]["agent_name"] == "tool_agent"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "MODEL_PATH": str(model),
        "TRAIN_FILE": str(tmp_path / "data" / "test.parquet"),
        "VAL_FILE": str(tmp_path / "val.parquet"),
        "TRAIN_BATCH_SIZE": "2",
        "MAX_RESPONSE_LENGTH": "32",
        "MICRO_BATCH_SIZE": "2",
        "ROLLOUT_N": "2",
        "N_GPUS": "1",
    }
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            "bash",
            "examples/multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh",
            "trainer.total_training_steps=1",
            f"trainer.output_dir={out}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            "trainer.logger=[console,jsonl]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "num_turns/mean" in m]
    assert [m["step"] for m in steps] == [1]
    assert "val/accuracy" in metrics[-1] or any("val" in k for k in metrics[-1])
    assert steps[0]["multiturn/aborted"] >= 0.0 and "actor/kl_loss" in steps[0]
