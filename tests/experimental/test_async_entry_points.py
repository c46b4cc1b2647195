"""verl's older async entry points run on ``trainer.v1.separate_async`` or stop with a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl.experimental.fully_async_policy.fully_async_main import main as fully_async_main
from verl.experimental.one_step_off_policy.main_ppo import main as one_step_main
from verl.trainer.async_rl.legacy import translate_fully_async, translate_one_step_off


def _value(args: list[str], key: str) -> str:
    return [a.split("=", 1)[1] for a in args if a.split("=", 1)[0] == key][-1]


def test_one_step_off_policy_is_one_batch_ahead_with_one_sync_per_step():
    args = translate_one_step_off(
        ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "rollout.n_gpus_per_node=1"]
    )
    assert _value(args, "trainer.v1.trainer_mode") == "separate_async"
    assert _value(args, "trainer.v1.separate_async.parameter_sync_step") == "4"  # 8 / 2 mini-batches, one sync
    assert _value(args, "trainer.v1.separate_async.num_warmup_batches") == "1"
    assert _value(args, "actor_rollout_ref.rollout.n_gpus_per_node") == "1"  # verl's top-level rollout pool keys


def test_fully_async_keys_map_onto_v1():
    args = translate_fully_async(
        [
            "async_training.partial_rollout=False",
            "async_training.staleness_threshold=0.5",
            "async_training.trigger_parameter_sync_step=2",
            "async_training.require_batches=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "rollout.total_rollout_steps=64",
        ]
    )
    assert _value(args, "trainer.v1.separate_async.parameter_sync_step") == "4"
    assert _value(args, "data.train_batch_size") == "8"
    assert _value(args, "trainer.v1.separate_async.num_warmup_batches") == "1"
    assert _value(args, "trainer.v1.sampler.max_off_policy_threshold") == "2"
    assert _value(args, "trainer.total_training_steps") == "8"


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "async_training.partial_rollout=False",
            "set async_training.partial_rollout=True",
        ),  # the hf engine resumes them
        ("async_training.use_dynamic_resource_scheduling=True", "hybrid_rollout.enable_switch"),
        ("async_training.max_staleness=2", "trainer.v1.separate_async"),
    ],
)
def test_fully_async_keys_without_an_equivalent_are_one_line_errors(arg, message, capsys):
    assert fully_async_main([arg]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_partial_rollouts_on_ray_are_a_one_line_error(capsys):
    # verl's default partial_rollout=True: a Ray rollout actor serves one call at a time
    assert fully_async_main(["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "async_training.partial_rollout=False" in err and "\n" not in err


@pytest.mark.e2e
def test_fully_async_entry_point_trains_with_its_defaults(tmp_path):
    out = tmp_path / "out"
    rc = fully_async_main(
        [
            "async_training.trigger_parameter_sync_step=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "data.max_prompt_length=16",
            "data.max_response_length=8",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=False",
            "data.val_files=[]",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=False",
            "trainer.plot=False",
            f"trainer.output_dir={out}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ]
    )
    assert rc == 0
    rows = {int(r["step"]): r for r in map(json.loads, Path(out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(rows) == [1, 2] and rows[2]["training/off_policy/trajectory_staleness_worst/max"] == 1.0


@pytest.mark.e2e
def test_one_step_off_policy_entry_point_trains_one_version_stale(tmp_path):
    out = tmp_path / "out"
    rc = one_step_main(
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "data.max_prompt_length=16",
            "data.max_response_length=8",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=False",
            "data.val_files=[]",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=False",
            "trainer.plot=False",
            f"trainer.output_dir={out}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ]
    )
    assert rc == 0
    rows = {int(r["step"]): r for r in map(json.loads, Path(out / "metrics.jsonl").read_text().splitlines())}
    assert rows[2]["training/off_policy/trajectory_staleness/mean"] == 1.0
