"""`verl config show|list`: resolved YAML on stdout, exit 2 with a one-line error on a bad config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from verl.cli import main as verl_main
from verl.config import list_presets, load_config
from verl.config.cli import main, split_config_arg


def test_show_prints_resolved_config_that_loads_back_equal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = [
        "gsm8k_grpo",
        "data.train_batch_size=32",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    ]
    assert main(["show", *args]) == 0
    out = capsys.readouterr().out
    shown = yaml.safe_load(out)
    assert shown["data"]["train_batch_size"] == 32
    assert shown["actor_rollout_ref"]["rollout"]["response_length"] == 512  # finalized
    assert shown["trainer"]["default_local_dir"] == "checkpoints/verl/gsm8k_grpo"  # resolved
    saved = tmp_path / "shown.yaml"
    saved.write_text(out)
    assert load_config(saved) == load_config("gsm8k_grpo", args[1:])


def test_show_without_config_is_what_verl_train_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert verl_main(["config", "show"]) == 0  # the quick start, as `verl train` with no CONFIG
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["algorithm"]["adv_estimator"] == "grpo" and shown["trainer"]["experiment_name"] == "quickstart"
    assert (
        verl_main(["config", "show", "data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=64"]) == 0
    )
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["experiment_name"] == "quickstart"


def test_bad_config_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "actor_rollout_ref.actor.ppo_mini_batchsize=4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "verl config: config error: unknown key 'actor_rollout_ref.actor.ppo_mini_batchsize' "
        "(did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?)\n"
    )
    assert main(["show", "no_such_preset"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_list_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == list_presets()
    assert main(["frobnicate"]) == 2
    assert "usage: verl config show" in capsys.readouterr().err
    assert main(["--help"]) == 0 and main([]) == 2


def test_config_argument_detection() -> None:
    assert split_config_arg(["my.yaml", "a.b=1"]) == ("my.yaml", ["a.b=1"])
    assert split_config_arg(["a.b=1"]) == (None, ["a.b=1"])
    assert split_config_arg(["~a.b"]) == (None, ["~a.b"])
    assert split_config_arg(["+a.b=1"]) == (None, ["+a.b=1"])
    assert split_config_arg([]) == (None, [])
