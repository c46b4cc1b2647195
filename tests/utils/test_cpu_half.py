"""`verl.utils.cpu_half`: which settings ask for half precision, and the warning when it is emulated."""

from __future__ import annotations

import logging

import torch

from verl.config import load_config
from verl.utils import cpu_half


def test_half_settings_names_every_half_key_of_a_role_that_runs():
    cfg = load_config(
        "quickstart",
        [
            "actor_rollout_ref.rollout.dtype=bfloat16",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision=bf16",
            "actor_rollout_ref.ref.fsdp_config.mixed_precision=bf16",
            "critic.model.fsdp_config.mixed_precision=bf16",
        ],
    )
    # the quick start has a KL loss (the reference runs) and no critic (GRPO)
    assert cpu_half.half_settings(cfg) == [
        ("actor_rollout_ref.rollout.dtype", torch.bfloat16),
        ("actor_rollout_ref.actor.fsdp_config.mixed_precision", torch.bfloat16),
        ("actor_rollout_ref.ref.fsdp_config.mixed_precision", torch.bfloat16),
    ]
    gae = load_config(
        "quickstart",
        [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.ref.fsdp_config.mixed_precision=bf16",
            "critic.model.fsdp_config.mixed_precision=bf16",
        ],
    )
    assert cpu_half.half_settings(gae) == [("critic.model.fsdp_config.mixed_precision", torch.bfloat16)]
    assert cpu_half.half_settings(load_config("quickstart")) == []


def test_check_warns_with_keys_and_factor_only_when_slow(monkeypatch, caplog):
    cfg = load_config("quickstart", ["actor_rollout_ref.rollout.dtype=bfloat16"])
    monkeypatch.setattr(cpu_half, "matmul_slowdown", lambda dtype: 47.0)
    with caplog.at_level(logging.WARNING, logger="verl.utils.cpu_half"):
        line = cpu_half.check_half_precision(cfg)
    assert line.startswith(
        "WARNING: bfloat16 matmul 47.0x the float32 time on this CPU (actor_rollout_ref.rollout.dtype)"
    )
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


def test_matmul_slowdown_is_a_cached_measurement_on_one_thread(monkeypatch):
    monkeypatch.setattr(cpu_half, "_SIZE", 64)
    cpu_half.matmul_slowdown.cache_clear()
    threads = torch.get_num_threads()
    seen = []
    real = cpu_half.best_seconds

    def timed(fn, **kwargs):
        seen.append(torch.get_num_threads())
        return real(fn, **kwargs)

    monkeypatch.setattr(cpu_half, "best_seconds", timed)
    try:
        factor = cpu_half.matmul_slowdown(torch.bfloat16)
        assert cpu_half.matmul_slowdown(torch.bfloat16) == factor and factor > 0  # cached: measured once
        assert seen == [1, 1]  # bf16 and float32 each timed once, on one thread
        assert torch.get_num_threads() == threads  # and the thread count restored
    finally:
        cpu_half.matmul_slowdown.cache_clear()
