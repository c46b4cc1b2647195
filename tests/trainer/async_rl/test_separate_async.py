"""``trainer.v1.trainer_mode=separate_async`` on the built-in task and model (local backend).

* At staleness 0 (``parameter_sync_step=1``, no warm-up batch, threshold 0) it equals the
  synchronous split-pool run step for step.
* With a warm-up batch the rollout runs one version ahead: spans and staleness as counted by
  hand, and generation really runs while the actor trains (overlapping wall-clock intervals).
* A run stopped after a checkpoint and resumed trains every prompt of the epoch exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from run_helpers import read_metrics

from verl.config import ConfigError, load_config
from verl.trainer import RLTrainer
from verl.trainer.async_rl.loop import SeparateAsyncLoop
from verl.trainer.async_rl.thread_clock import thread_times

from tests.trainer.ppo.test_split_rollout import assert_same_metrics, builtin_overrides

_SPLIT = {"actor_rollout_ref.hybrid_engine": False, "data.val_files": "[]", "trainer.test_freq": -1}
_ASYNC = {"trainer.v1.trainer_mode": "separate_async", "trainer.v1.separate_async.parameter_sync_step": 1}


def _overrides(run_dir: Path, **extra: object) -> list[str]:
    return builtin_overrides(run_dir, **{**_SPLIT, "trainer.total_training_steps": 2, **extra})


def test_staleness_zero_equals_the_synchronous_split_pool_run(tmp_path):
    RLTrainer(config=load_config(None, _overrides(tmp_path / "sync"))).fit()
    on_policy = {
        **_ASYNC,
        "trainer.v1.separate_async.num_warmup_batches": 0,
        "trainer.v1.sampler.max_off_policy_threshold": 0,
    }
    RLTrainer(config=load_config(None, _overrides(tmp_path / "async", **on_policy))).fit()
    sync, async_ = read_metrics(tmp_path / "sync"), read_metrics(tmp_path / "async")
    assert assert_same_metrics(sync, async_, tol=1e-6, b_may_add=True) > 50
    assert any(abs(sync[s]["actor/pg_loss"]) > 1e-4 for s in sync)  # the policy really moved
    for step in (1, 2):
        assert async_[step]["training/off_policy/trajectory_staleness/max"] == 0.0
        assert async_[step]["training/off_policy/trajectory_spans/max"] == 1.0
        assert 0.0 <= async_[step]["trainer/idle_ratio"] <= 1.0 and 0.0 <= async_[step]["rollouter/idle_ratio"] <= 1.0
        if thread_times(threading.get_native_id()) is not None:  # Linux: each thread's CPU and run-queue share
            assert async_[step]["trainer/cpu_s"] > 0.0 and 0.0 <= async_[step]["rollouter/runq_ratio"] <= 1.0


class _Clock:
    """Records the wall-clock intervals of wrapped calls."""

    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[float, float]]] = {"gen": [], "train": []}
        self.lock = threading.Lock()

    def wrap(self, obj: object, method: str, kind: str) -> None:
        inner = getattr(obj, method)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self.lock:
                    self.spans[kind].append((start, time.perf_counter()))

        setattr(obj, method, timed)

    def overlap_s(self) -> float:
        return sum(
            max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in self.spans["gen"] for s2, e2 in self.spans["train"]
        )


def test_one_batch_ahead_is_one_version_stale_and_generation_overlaps_training(tmp_path):
    cfg = load_config(
        None,
        _overrides(
            tmp_path, **_ASYNC, **{"trainer.total_training_steps": 3, "trainer.v1.separate_async.num_warmup_batches": 1}
        ),
    )
    trainer = RLTrainer(config=cfg)
    parts = trainer._parts()
    clock = _Clock()
    clock.wrap(parts.actor_rollout_wg.rollout_wg, "generate_sequences", "gen")
    clock.wrap(parts.actor_rollout_wg.actor_wg, "update_actor", "train")
    trainer.fit()
    m = read_metrics(tmp_path)
    # step 1 trains the warm-up batch (submitted and generated at version 0): on-policy;
    # later steps train the batch submitted one step earlier: started by the previous weights, and
    # a trajectory still running at the sync goes on under the new ones (partial rollout)
    assert m[1]["training/off_policy/trajectory_staleness_worst/max"] == 0.0
    for step in (2, 3):
        assert m[step]["training/off_policy/trajectory_staleness_worst/min"] == 1.0
        assert m[step]["training/off_policy/trajectory_spans/max"] <= 2.0
        assert 0.0 <= m[step]["training/off_policy/trajectory_staleness/mean"] <= 1.0
        assert m[step]["training/off_policy/evicted_samples"] == 0.0  # span 2 <= the default threshold 8
    assert clock.overlap_s() > 0.0, clock.spans  # the rollout generated while the actor trained


def _trained_prompts(cfg_overrides: list[str]) -> tuple[list, SeparateAsyncLoop]:
    trainer = RLTrainer(config=load_config(None, cfg_overrides))
    loop = SeparateAsyncLoop(trainer)
    indices: list = []
    update = trainer._update_stages

    def record(batch, metrics, timing):
        indices.extend(batch.non_tensor_batch["index"][:: trainer.config.actor_rollout_ref.rollout.n].tolist())
        return update(batch, metrics, timing)

    trainer._update_stages = record
    try:
        loop.run()
    finally:
        trainer.close()
    return indices, loop


def test_a_resumed_run_trains_every_prompt_of_the_epoch_exactly_once(tmp_path):
    # 32 prompts, 8 per step: one epoch = 4 steps; stopped after the checkpoint of step 2 with
    # one batch (the warm-up batch's lead) submitted but not trained
    base = {
        **_ASYNC,
        "data.train_max_samples": 32,
        "trainer.save_freq": 2,
        "trainer.v1.separate_async.num_warmup_batches": 1,
        "trainer.v1.sampler.max_off_policy_strategy": "wait",
    }
    first, loop1 = _trained_prompts(_overrides(tmp_path, **base, **{"trainer.total_training_steps": 2}))
    assert len(loop1.untrained) == 8  # in flight when the run stopped, saved in the checkpoint
    second, _ = _trained_prompts(_overrides(tmp_path, **base, **{"trainer.total_training_steps": 4}))
    counts = Counter(first + second)
    assert len(first) == len(second) == 16
    assert sorted(counts) == list(range(32)) and set(counts.values()) == {1}


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"data.gen_batch_size": 3}, "must divide data.train_batch_size"),
        ({"trainer.v1.separate_async.parameter_sync_step": 4}, "must equal parameter_sync_step"),
        ({"trainer.v1.trainer_mode": "separate"}, "did you mean 'separate_async'"),
        ({"trainer.v1.sampler.max_off_policy_strategy": "keep"}, "must be drop or wait"),
        ({"trainer.v1.sampler.sync_refill_failed_groups": True}, "is not supported yet"),
        ({"trainer.v1.separate_async.hybrid_rollout.enable_switch": True}, "is not supported yet"),
        ({"trainer.v1.sampler.sampler_kwargs": "{a: 1}"}, "only a custom sampler"),
        ({"algorithm.filter_groups.enable": True}, "is not supported yet"),
    ],
)
def test_settings_that_cannot_run_are_one_line_errors(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, _overrides(tmp_path, **{**_ASYNC, **extra}))
    assert "\n" not in str(err.value)


def test_separate_async_puts_the_rollout_on_its_own_pool_as_verl(tmp_path):
    # verl's V1 script leaves hybrid_engine at its default (true) and fetches one prompt at a time
    cfg = load_config(
        None, _overrides(tmp_path, **{**_ASYNC, "actor_rollout_ref.hybrid_engine": True, "data.gen_batch_size": 1})
    )
    assert cfg.actor_rollout_ref.hybrid_engine is False


def test_verl_defaults_and_use_v1_are_accepted(tmp_path):
    cfg = load_config(None, _overrides(tmp_path, **{"trainer.use_v1": True}))
    v1 = cfg.trainer.v1
    assert (v1.trainer_mode, v1.separate_async.parameter_sync_step, v1.separate_async.num_warmup_batches) == (
        "sync",
        4,
        1,
    )
    assert (v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy) == (8, "drop")
    assert v1.colocate_async.num_warmup_batches == 1 and v1.sampler.sync_refill_failed_groups is False


@pytest.mark.e2e
def test_a_sync_during_a_long_generation_gives_partial_rollouts(tmp_path):
    # 96-token responses take longer to generate than a step takes to train, so each sync lands
    # while the next batch is being generated: the engine pauses, loads the new weights and every
    # trajectory finishes under them (span 2, staleness 0, worst staleness 1)
    cfg = load_config(
        None,
        _overrides(
            tmp_path,
            **_ASYNC,
            **{
                "trainer.total_training_steps": 3,
                "data.max_response_length": 96,
                "actor_rollout_ref.rollout.ignore_eos": True,
            },
        ),
    )
    RLTrainer(config=cfg).fit()
    m = read_metrics(tmp_path)
    assert any(m[s]["training/off_policy/trajectory_spans/max"] == 2.0 for s in (2, 3)), m
    for s in (2, 3):
        assert m[s]["training/off_policy/trajectory_staleness_worst/min"] == 1.0
        assert m[s]["training/off_policy/trajectory_spans/max"] <= 2.0
