"""When the RL loop validates: verl's schedule (``test_freq > 0 and (last step or step % test_freq == 0)``)."""

from __future__ import annotations

import pytest
from run_helpers import tiny_run_overrides

from verl.config import load_config
from verl.trainer.ppo.trainer import RLTrainer

VAL = {"data.val_files": "[builtin://arithmetic/test]", "data.val_max_samples": 4}


def _validated_steps(model_dir, run_dir, **extra) -> list[int]:
    cfg = load_config(None, tiny_run_overrides(model_dir, run_dir, **{**VAL, **extra}))
    return [h["step"] for h in RLTrainer(config=cfg).fit() if "val/accuracy" in h]


@pytest.mark.e2e
def test_test_freq_minus_one_never_validates_during_training(tiny_model_dir, tmp_path):
    # verl's default test_freq=-1: no validation after the last step either; val_before_train still runs
    assert _validated_steps(
        tiny_model_dir, tmp_path, **{"trainer.test_freq": -1, "trainer.val_before_train": True}
    ) == [0]


@pytest.mark.e2e
def test_positive_test_freq_validates_every_n_and_after_the_last_step(tiny_model_dir, tmp_path):
    assert _validated_steps(
        tiny_model_dir, tmp_path, **{"trainer.test_freq": 2, "trainer.total_training_steps": 3}
    ) == [2, 3]
