"""Real input, multi-turn: ``verl prepare gsm8k --multiturn`` on the GSM8K test split, a random
Qwen2 model with the Qwen2.5 tokenizer, 2 GRPO steps with multi_turn.enable=true, the GSM8K
tool and interaction: completes, every metric finite, tool calls / malformed calls counted,
rollout_data_dir written. Also: multi_turn.enable without tools or interaction is a config error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.ppo.multiturn_helpers import boosted_random_qwen, finite_metrics
from verl.config import ConfigError, load_config
from verl.data.prepare import main as prepare_main
from verl.trainer import RLTrainer

CONFIGS = Path(__file__).resolve().parents[3] / "verl" / "tools" / "configs"


def test_enable_without_tools_or_interaction_is_a_config_error():
    with pytest.raises(
        ConfigError, match="multi_turn.enable=true needs .*tool_config_path or .*interaction_config_path"
    ):
        load_config(None, ["actor_rollout_ref.rollout.multi_turn.enable=true"])
    with pytest.raises(
        ConfigError, match="`actor_rollout_ref.rollout.multi_turn.use_inference_chat_template` is not supported yet"
    ):
        load_config(None, ["actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true"])


@pytest.mark.e2e
def test_two_grpo_steps_multiturn_gsm8k(shared_dir, tmp_path):
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
    dump = tmp_path / "rollouts"
    cfg = load_config(
        None,
        [
            f"actor_rollout_ref.model.path={model}",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=2",
            f"data.train_files=[{tmp_path / 'data' / 'test.parquet'}]",
            "data.val_files=[]",
            "data.train_batch_size=2",
            "data.return_raw_chat=true",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_prompt_length=1024",
            "data.filter_overlong_prompts=true",
            "data.max_response_length=32",
            "trainer.total_training_steps=2",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CONFIGS / 'gsm8k_tool_config.yaml'}",
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={CONFIGS / 'gsm8k_interaction_config.yaml'}",
            "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable",
            "trainer.val_before_train=false",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            f"trainer.rollout_data_dir={dump}",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
    )
    history = RLTrainer(config=cfg).fit()
    assert [h["step"] for h in history] == [1, 2]
    finite_metrics(history)
    for h in history:
        for key in (
            "num_turns/min",
            "num_turns/max",
            "num_turns/mean",
            "tool_call_counts/mean",
            "multiturn/tool_errors",
            "multiturn/tool_timeouts",
            "multiturn/malformed_tool_calls",
            "multiturn/tokenization_mismatch",
            "multiturn/aborted",
        ):
            assert key in h, key
    assert max(h["num_turns/max"] for h in history) > 1  # turns ended and tools / the user answered
    rows = [json.loads(line) for f in sorted(dump.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert sorted(p.name for p in dump.glob("*.jsonl")) == ["1.jsonl", "2.jsonl"] and len(rows) == 8
    malformed = sum(1 for r in rows for c in r["tool_calls"] if c["status"] == "malformed")
    assert malformed == sum(h["multiturn/malformed_tool_calls"] for h in history)
    assert all(r["messages"][0]["role"] == "system" and "score" in r for r in rows)
