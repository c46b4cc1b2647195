"""The sentinel's checks on scripted metrics: each trips on its fault, none on a steady run."""

from __future__ import annotations

import math

import pytest
import torch

from verl.config import ConfigError, load_config
from verl.config.schema_guards import SentinelConfig
from verl.trainer.guards.sentinel import DivergenceSentinel


def steady(step: int) -> dict[str, float]:
    """A healthy step: grad norm, entropy and score wobble a little."""
    wobble = 1.0 + 0.05 * math.sin(step)
    return {
        "actor/grad_norm": 2.0 * wobble,
        "actor/entropy": 1.5 * wobble,
        "critic/score/mean": 0.5 + 0.02 * math.cos(step),
        "training/rollout_k3_kl": 1e-4,
        "actor/pg_loss": 0.1,
    }


def run(sentinel: DivergenceSentinel, steps: int, fault_at: int | None = None, fault: dict | None = None, adv=None):
    trips = {}
    for step in range(1, steps + 1):
        metrics = steady(step)
        if step == fault_at:
            metrics.update(fault or {})
        reasons, _ = sentinel.check(step, metrics, adv if step == fault_at else torch.zeros(2, 3))
        if reasons:
            trips[step] = reasons
    return trips


def test_steady_run_never_trips():
    assert run(DivergenceSentinel(SentinelConfig()), 300) == {}


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"actor/grad_norm": 2.0 * 20}, "grad_norm:"),
        ({"actor/entropy": 1.5 * 2.5}, "entropy:"),
        ({"actor/entropy": 1.5 / 2.5}, "entropy:"),
        ({"critic/score/mean": 0.05}, "reward_collapse:"),
        ({"training/rollout_k3_kl": 0.5}, "rollout_kl:"),
        ({"actor/pg_loss": float("nan")}, "non_finite: actor/pg_loss"),
    ],
)
def test_each_fault_trips_with_its_reason(fault, reason):
    trips = run(DivergenceSentinel(SentinelConfig()), 12, fault_at=10, fault=fault)
    assert list(trips) == [10] and any(r.startswith(reason) for r in trips[10]), trips


def test_statistical_checks_wait_for_warmup_but_non_finite_does_not():
    cfg = SentinelConfig(warmup_steps=5)
    assert run(DivergenceSentinel(cfg), 4, fault_at=3, fault={"actor/grad_norm": 1e4}) == {}
    trips = run(DivergenceSentinel(cfg), 4, fault_at=1, adv=torch.tensor([[1.0, float("inf")]]))
    assert trips == {1: ["non_finite: advantages not finite"]}


def test_a_tripped_step_stays_out_of_the_statistics():
    s = DivergenceSentinel(SentinelConfig())
    run(s, 10)
    for step in (11, 12):  # two spikes in a row both trip: the first does not widen the window
        reasons, metrics = s.check(step, {**steady(step), "actor/grad_norm": 100.0}, None)
        assert reasons and metrics["sentinel/tripped"] == 1.0
    assert sorted(s.good) == list(range(1, 11))
    s.forget_after(5)
    assert sorted(s.good) == [1, 2, 3, 4, 5]


def test_config_ranges_and_rollback_needs_checkpoints():
    with pytest.raises(ConfigError, match=r"trainer.sentinel.action: must be one of warn, stop, rollback"):
        load_config(None, ["trainer.sentinel.action=halt"])
    with pytest.raises(ConfigError, match=r"trainer.sentinel.action: rollback .* set trainer.save_freq > 0"):
        load_config(None, ["trainer.sentinel.action=rollback"])
    with pytest.raises(ConfigError, match=r"trainer.alarms.clip_ratio: must be in \(0, 1\]"):
        load_config(None, ["trainer.alarms.clip_ratio=1.5"])
    cfg = load_config(None, ["trainer.sentinel.action=rollback", "trainer.save_freq=5"])
    assert cfg.trainer.sentinel.action == "rollback"


def test_rollback_in_an_async_mode_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"`trainer.sentinel.action=rollback` is not supported yet: .*separate_async"):
        load_config(
            None,
            [
                "trainer.sentinel.action=rollback",
                "trainer.save_freq=5",
                "trainer.v1.trainer_mode=separate_async",
                "actor_rollout_ref.hybrid_engine=false",
            ],
        )
