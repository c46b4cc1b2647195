"""`verl verify`: the quick start agrees on every path pair; a broken packing path fails, named."""

from __future__ import annotations

import math

import pytest
import torch

from verl.config import load_config
from verl.commands.verify import (
    CHECKS,
    CheckResult,
    Run,
    compare,
    format_table,
    main,
    slice_overrides,
    variant_overrides,
)


def test_compare_takes_the_largest_normalised_difference_by_hand():
    base = Run(
        {1: {"actor/pg_loss": 0.5, "actor/grad_norm": 200.0, "timing_s/step": 1.0, "step": 1}}, {"w": torch.zeros(3)}
    )
    other = Run(
        {1: {"actor/pg_loss": 0.5 + 2e-6, "actor/grad_norm": 200.0 + 1e-3, "timing_s/step": 9.0, "step": 1}},
        {"w": torch.tensor([0.0, 3e-6, 0.0])},
    )
    r = compare("micro", base, other, 1e-5)
    # |d| / max(1, |b|): pg_loss 2e-6, grad_norm 1e-3 / 200.001 = 5e-6, weight 3e-6; timing is not compared
    assert r.max_diff == pytest.approx(1e-3 / 200.001) and r.where == "actor/grad_norm (step 1)"
    assert r.compared == 3 and r.passed
    assert not compare("micro", base, Run({}, {}), 1e-5).passed  # a missing step fails
    nan = compare("micro", base, Run({1: {**other.metrics[1], "actor/pg_loss": math.nan}}, other.weights), 1e-5)
    assert nan.max_diff == math.inf and not nan.passed


def test_table_names_the_failing_check():
    table = format_table(
        [CheckResult("packed", 0.03, "actor/entropy (step 1)", 1e-4, 120), CheckResult("micro", 0.0, "-", 1e-5, 120)]
    )
    assert "packed vs padded" in table and "FAIL" in table and table.endswith("FAILED: packed vs padded")


@pytest.mark.parametrize("preset", ["quickstart", "gsm8k_grpo", "gsm8k_ppo"])
def test_slice_and_every_variant_are_valid_configs(preset):
    cfg = load_config(preset)
    base = slice_overrides(cfg, 2, 4)
    sliced = load_config(preset, base)
    assert sliced.trainer.total_training_steps == 2 and sliced.data.train_batch_size == 4
    for check in CHECKS:
        if check == "async":
            load_config(preset, [*base, "actor_rollout_ref.hybrid_engine=false", *variant_overrides(check, cfg, 4)])
        else:
            load_config(preset, [*base, *variant_overrides(check, cfg, 4)])


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_verify_quickstart_passes(capsys):
    assert main(["quickstart"]) == 0
    out = capsys.readouterr().out
    for label in (
        "local vs 2 Ray workers",
        "packed vs padded",
        "micro-batched vs not",
        "resumed vs uninterrupted",
        "sync vs async (staleness 0)",
    ):
        assert label in out
    assert "checks pass" in out and "FAIL" not in out


@pytest.mark.e2e
def test_broken_packing_path_fails_naming_it(monkeypatch, capsys):
    import verl.modules.forward as forward

    original = forward.unpack_responses

    def broken(values, packed):  # a packing bug: every unpacked value off by 1e-2
        return original(values, packed) + 1e-2

    monkeypatch.setattr(forward, "unpack_responses", broken)
    assert main(["quickstart", "--checks", "packed,micro"]) == 1
    out = capsys.readouterr().out
    packed_row = next(line for line in out.splitlines() if line.startswith("packed vs padded"))
    micro_row = next(line for line in out.splitlines() if line.startswith("micro-batched vs not"))
    assert "FAIL" in packed_row and "pass" in micro_row  # the padded paths still agree
    assert out.rstrip().endswith("FAILED: packed vs padded")
