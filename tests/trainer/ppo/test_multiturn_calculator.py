"""The built-in multi-turn task wired as a preset: ``verl train calculator`` loads the built-in
calculator rows, the tiny tool-calling model and the built-in calculator tool config; its
trajectories call the tool through the tool_agent loop."""

from __future__ import annotations

import pytest

from tests.trainer.ppo.multiturn_helpers import finite_metrics
from verl.config import load_config
from verl.workers.rollout.agent_loop.manager import builtin_config_file


def test_preset_and_builtin_names_resolve():
    cfg = load_config("calculator")
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    assert mt.enable and mt.tool_config_path == "builtin://calculator"
    assert builtin_config_file("builtin://calculator", "tool").endswith(
        "verl/tools/configs/calculator_tool_config.yaml"
    )
    assert builtin_config_file("builtin://gsm8k", "interaction").endswith("gsm8k_interaction_config.yaml")
    assert builtin_config_file("/x/y.yaml", "tool") == "/x/y.yaml"
    with pytest.raises(ValueError, match="built-in: calculator"):
        builtin_config_file("builtin://nope", "tool")


@pytest.mark.e2e
def test_calculator_preset_one_step(tmp_path):
    from verl.trainer import RLTrainer

    cfg = load_config(
        "calculator",
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "data.val_files=[]",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
    )
    history = RLTrainer(config=cfg).fit()
    finite_metrics(history)
    (h,) = history
    assert h["tool_call_counts/max"] >= 1.0  # the warm-started model calls the calculator
    assert h["num_turns/max"] >= 3.0 and h["multiturn/tokenization_mismatch"] == 0.0


@pytest.mark.e2e
@pytest.mark.slow
def test_verl_train_calculator_learns_to_call_the_tool(tmp_path, capsys):
    """The issue's must-show: held-out accuracy with tools rises by >= 15 points (measured: 57.4% ->
    88.7% at step 4 -> 100.0% at step 12 in 123 s on the shared 2-core machine) and tool calls per
    trajectory are logged."""
    import json

    from verl.commands.train import train_cli

    assert (
        train_cli(
            [
                "calculator",
                f"trainer.output_dir={tmp_path / 'out'}",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                "trainer.progress_bar=false",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    accs = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    assert accs[0] == pytest.approx(147 / 256) and accs[-1] - accs[0] >= 0.15
    calls = [r["tool_call_counts/mean"] for r in rows if "tool_call_counts/mean" in r]
    assert len(calls) == 12 and calls[-1] > calls[0]
    assert "held-out accuracy at step 0: 57.4%" in capsys.readouterr().out
