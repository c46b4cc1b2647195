"""`verl.utils.cpu_half`: which settings ask for half precision, and the warning when it is emulated."""

from __future__ import annotations

import logging

import pytest
import torch

from verl.config import load_config
from verl.utils import cpu_half


def test_half_settings_names_every_half_key_and_nothing_else():
    cfg = load_config("quickstart", ["actor_rollout_ref.rollout.dtype=bfloat16",
                                     "actor_rollout_ref.actor.fsdp_config.mixed_precision=bf16",
                                     "critic.model.fsdp_config.mixed_precision=float32"])
    assert cpu_half.half_settings(cfg) == [("actor_rollout_ref.rollout.dtype", torch.bfloat16),
                                           ("actor_rollout_ref.actor.fsdp_config.mixed_precision", torch.bfloat16)]
    assert cpu_half.half_settings(load_config("quickstart")) == []


def test_check_warns_with_keys_and_factor_only_when_slow(monkeypatch, caplog):
    cfg = load_config("quickstart", ["actor_rollout_ref.rollout.dtype=bfloat16"])
    monkeypatch.setattr(cpu_half, "matmul_slowdown", lambda dtype: 47.0)
    with caplog.at_level(logging.WARNING, logger="verl.utils.cpu_half"):
        line = cpu_half.check_half_precision(cfg)
    assert line.startswith("bfloat16 matmul 47.0x the float32 time on this CPU (actor_rollout_ref.rollout.dtype)")
    assert "set float32" in line
    assert [r.getMessage() for r in caplog.records] == [f"half precision: {line}"]

    caplog.clear()
    monkeypatch.setattr(cpu_half, "matmul_slowdown", lambda dtype: 0.4)  # native bf16 (AMX): faster than fp32
    with caplog.at_level(logging.WARNING, logger="verl.utils.cpu_half"):
        line = cpu_half.check_half_precision(cfg)
    assert line == "bfloat16 matmul 0.4x the float32 time on this CPU (actor_rollout_ref.rollout.dtype)"
    assert caplog.records == []


def test_nothing_to_check_without_half_settings_or_on_gpu(monkeypatch):
    def fail(dtype):
        raise AssertionError("no measurement expected")

    monkeypatch.setattr(cpu_half, "matmul_slowdown", fail)
    assert cpu_half.check_half_precision(load_config("quickstart")) is None
    cfg = load_config("quickstart", ["actor_rollout_ref.rollout.dtype=bfloat16"])
    cfg.trainer.device = "cuda"  # the check is for CPU runs only (validation would refuse cuda here)
    assert cpu_half.check_half_precision(cfg) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_slowdown_is_a_real_measurement(dtype):
    factor = cpu_half.matmul_slowdown(dtype)
    if dtype == torch.float32:
        assert 0.2 < factor < 5.0, factor  # float32 against itself (timing noise only)
    else:
        assert factor > 0.0
    assert cpu_half.matmul_slowdown(dtype) == factor  # cached per process
