"""``trainer.v1.trainer_mode=colocate_async`` on the built-in task and model (one pool, local backend).

* Without warm-up batches and at threshold 0 nothing is carried: it equals the synchronous
  colocated run step for step.
* With a warm-up batch and a long trajectory the generation call is cut once the batch is
  finished: the next batch was generated before that trajectory ended, which finishes under the
  next weights (span 2); the step's off-policy metrics equal a hand count of the trained tags.
* A run stopped after a checkpoint and resumed loses and repeats no prompt.
* ``verl bench --mode colocate_async`` runs its steps; settings that cannot run are one-line errors.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from run_helpers import read_metrics

from verl.config import ConfigError, load_config
from verl.trainer import RLTrainer
from verl.trainer.async_rl import build_async_loop
from verl.trainer.async_rl.colocate import ColocateAsyncLoop
from verl.trainer.async_rl.off_policy import off_policy_metrics
from verl.commands.bench.bench import main as bench_main

from tests.trainer.ppo.test_split_rollout import assert_same_metrics, builtin_overrides

_BASE = {"data.val_files": "[]", "trainer.test_freq": -1, "trainer.total_training_steps": 2}
_COLO = {"trainer.v1.trainer_mode": "colocate_async"}
# temperature 3: the built-in model's answers vary in length (3 to 13+ tokens), a long tail to cut
_LONG_TAIL = {"data.max_response_length": 32, "actor_rollout_ref.rollout.temperature": 3.0}


def _overrides(run_dir: Path, **extra: object) -> list[str]:
    return builtin_overrides(run_dir, **{**_BASE, **extra})


@pytest.mark.e2e
def test_no_warmup_at_threshold_zero_equals_the_synchronous_colocated_run(tmp_path):
    RLTrainer(config=load_config(None, _overrides(tmp_path / "sync"))).fit()
    on_policy = {
        **_COLO,
        "trainer.v1.colocate_async.num_warmup_batches": 0,
        "trainer.v1.sampler.max_off_policy_threshold": 0,
    }
    RLTrainer(config=load_config(None, _overrides(tmp_path / "colo", **on_policy))).fit()
    sync, colo = read_metrics(tmp_path / "sync"), read_metrics(tmp_path / "colo")
    assert assert_same_metrics(sync, colo, tol=1e-6, b_may_add=True) > 50
    assert any(abs(sync[s]["actor/pg_loss"]) > 1e-4 for s in sync)  # the policy really moved
    for step in (1, 2):
        assert colo[step]["training/off_policy/trajectory_spans/max"] == 1.0
        assert colo[step]["training/off_policy/trajectory_staleness/max"] == 0.0
        assert colo[step]["colocate_async/long_tail_cut"] == 0.0 and colo[step]["colocate_async/carried_groups"] == 0.0


def _recording_trainer(overrides: list[str]) -> tuple[RLTrainer, ColocateAsyncLoop, list]:
    """A trainer whose loop records each trained batch (uids, per-token versions, response mask)."""
    trainer = RLTrainer(config=load_config(None, overrides))
    loop = build_async_loop(trainer)
    assert isinstance(loop, ColocateAsyncLoop)
    batches: list = []
    update = trainer._update_stages

    def record(batch, metrics, timing):
        b = batch.batch
        batches.append(
            (
                list(batch.non_tensor_batch["uid"]),
                b["rollout_policy_versions"].clone(),
                b["response_mask"].clone(),
                list(batch.non_tensor_batch["index"]),
            )
        )
        return update(batch, metrics, timing)

    trainer._update_stages = record
    return trainer, loop, batches


@pytest.mark.e2e
def test_the_long_tail_is_cut_and_finishes_under_the_next_weights(tmp_path):
    trainer, loop, batches = _recording_trainer(_overrides(tmp_path, **_COLO, **_LONG_TAIL))
    try:
        loop.run()
    finally:
        trainer.close()
    m = read_metrics(tmp_path)
    # step 1 generated batches 0 and 1 (the warm-up batch) in one call and stopped once 8 groups
    # were finished: the unfinished trajectories were carried
    assert m[1]["colocate_async/long_tail_cut"] == 1.0 and m[1]["colocate_async/carried_groups"] >= 1.0
    uids2, versions2, mask2, _ = batches[1]
    sampled = [set(versions2[i][mask2[i].bool()].tolist()) for i in range(len(uids2))]
    carried = [i for i, s in enumerate(sampled) if s == {0, 1}]
    assert carried, sampled  # begun by version 0, finished by version 1: span 2
    # generation of batch 1 started before the carried trajectory finished: batch 1 tokens of version 0
    batch1_v0 = [
        uid
        for uids, v, mask, _ in batches
        for i, uid in enumerate(uids)
        if uid.startswith("1-") and 0 in v[i][mask[i].bool()].tolist()
    ]
    assert batch1_v0
    long_len = max(int(mask2[i].sum()) for i in carried)
    assert long_len > int(batches[0][2].sum(dim=1).max())  # longer than anything trained at step 1
    # the logged metrics are verl's off-policy metrics of exactly the trained tags (counted here by hand)
    spans = [max(s) - min(s) + 1 for s in sampled]
    assert m[2]["training/off_policy/trajectory_spans/max"] == 2.0 == max(spans)
    assert m[2]["training/off_policy/trajectory_spans/mean"] == pytest.approx(sum(spans) / len(spans), abs=1e-12)
    assert m[2]["training/off_policy/trajectory_staleness_worst/max"] == 1.0
    assert m[2]["training/off_policy/trajectory_staleness/mean"] == pytest.approx(
        sum(1 - max(s) for s in sampled) / len(sampled), abs=1e-12
    )
    expected = off_policy_metrics(versions2, mask2, trained_version=1)
    assert all(m[2][k] == pytest.approx(v, abs=1e-12) for k, v in expected.items())
    assert torch.equal(versions2 >= 0, mask2.bool())  # a tag on every sampled token, none elsewhere


@pytest.mark.e2e
def test_drop_at_threshold_zero_evicts_the_warm_up_lead_and_stays_on_policy(tmp_path):
    # the groups left after step 1 (submitted at version 0) span 2 versions at step 2 > 1: all 8
    # evicted before generating, 8 fresh prompts submitted in their place
    drop = {**_COLO, **_LONG_TAIL, "trainer.v1.sampler.max_off_policy_threshold": 0}
    trainer, loop, batches = _recording_trainer(_overrides(tmp_path, **drop))
    try:
        loop.run()
    finally:
        trainer.close()
    m = read_metrics(tmp_path)
    assert m[1]["training/off_policy/evicted_samples"] == 0.0 and m[2]["training/off_policy/evicted_samples"] == 8.0
    assert m[2]["training/off_policy/evicted_samples_staleness/min"] == 2.0
    assert len(loop.evicted_uids) == 8 and not set(loop.evicted_uids) & set(loop.trained_uids)
    for step in (1, 2):
        assert m[step]["training/off_policy/trajectory_spans/max"] == 1.0
        assert m[step]["training/off_policy/trajectory_staleness_worst/max"] == 0.0


@pytest.mark.e2e
def test_wait_lets_the_groups_at_the_threshold_finish_and_drops_nothing(tmp_path):
    wait = {
        **_COLO,
        **_LONG_TAIL,
        "trainer.v1.sampler.max_off_policy_threshold": 2,
        "trainer.v1.sampler.max_off_policy_strategy": "wait",
        "trainer.total_training_steps": 3,
    }
    trainer, loop, batches = _recording_trainer(_overrides(tmp_path, **wait))
    try:
        loop.run()
    finally:
        trainer.close()
    m = read_metrics(tmp_path)
    for step in (1, 2, 3):
        assert m[step]["training/off_policy/evicted_samples"] == 0.0
        # a group trained at version v was submitted at v - 1 or later: no token older than v - 1
        assert m[step]["training/off_policy/trajectory_staleness_worst/max"] <= 1.0
    assert not loop.evicted_uids and len(loop.trained_uids) == 24
    # nothing submitted at version v - 1 is left unfinished after step v (it reached the threshold)
    assert all(f.submit_version >= 2 or f.finished for f in loop.flights)


@pytest.mark.e2e
def test_a_resumed_run_loses_and_repeats_no_prompt(tmp_path):
    # 32 prompts, 8 per step: one epoch = 4 steps; stopped after the checkpoint of step 2 with the
    # warm-up batch's lead (and any carried tail) submitted but not trained
    base = {**_COLO, **_LONG_TAIL, "data.train_max_samples": 32, "trainer.save_freq": 2}
    t1, loop1, first = _recording_trainer(_overrides(tmp_path, **base, **{"trainer.total_training_steps": 2}))
    try:
        loop1.run()
    finally:
        t1.close()
    assert len(loop1.flights) == 8  # in flight or finished, not trained: saved with the checkpoint
    t2, loop2, second = _recording_trainer(_overrides(tmp_path, **base, **{"trainer.total_training_steps": 4}))
    try:
        loop2.run()
    finally:
        t2.close()
    trained = [uid for uids, *_ in first + second for uid in uids[::4]]  # rollout.n = 4 rows per prompt
    assert len(trained) == 32 and set(Counter(trained).values()) == {1}  # none trained twice
    assert not loop1.evicted_uids and not loop2.evicted_uids  # spans <= 3 < the default threshold 8
    # every prompt pulled (5 batches of 8: the 4th step submits the next epoch's first) is trained or still pending
    submitted = {f"{b}-{i}" for b in range(5) for i in range(8)}
    assert set(trained) | {f.uid for f in loop2.flights} == submitted
    assert not set(trained) & {f.uid for f in loop2.flights}
    indices = [i for *_, idx in first + second for i in idx[::4]]
    assert len(set(indices)) == len(indices)  # no dataset row trained twice within the epoch


def test_bench_runs_colocate_async_steps(tmp_path):
    out = tmp_path / "bench.json"
    assert (
        bench_main(
            [
                "--mode",
                "colocate_async",
                "--steps",
                "2",
                "--threads",
                "1",
                "--work-dir",
                str(tmp_path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert "trainer.v1.trainer_mode=colocate_async" in record["overrides"]
    assert len(record["metrics"]) == 2 and record["summary"]["throughput"] > 0
    assert all("colocate_async/long_tail_cut" in m for m in record["metrics"])


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"actor_rollout_ref.hybrid_engine": False}, "generates in the actor's workers"),
        ({"trainer.v1.colocate_async.num_warmup_batches": -1}, "must be >= 0"),
        ({"trainer.backend": "ray", "actor_rollout_ref.rollout.mode": "async"}, "agent loops with .* on Ray"),
        ({"actor_rollout_ref.rollout.over_sample_rate": 0.5}, "is not supported yet"),
        ({"algorithm.filter_groups.enable": True}, "is not supported yet"),
        ({"data.gen_batch_size": 4}, "is not supported yet"),
    ],
)
def test_settings_that_cannot_run_are_one_line_errors(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, _overrides(tmp_path, **{**_COLO, **extra}))
    assert "\n" not in str(err.value)


def test_colocate_async_loads_with_verl_keys(tmp_path):
    cfg = load_config(
        None,
        _overrides(tmp_path, **{**_COLO, "trainer.use_v1": True, "trainer.v1.colocate_async.num_warmup_batches": 2}),
    )
    assert cfg.trainer.v1.trainer_mode == "colocate_async" and cfg.trainer.v1.colocate_async.num_warmup_batches == 2
    assert cfg.actor_rollout_ref.hybrid_engine is True


def _scored_run(run_dir: Path, monkeypatch, streaming: bool) -> tuple[list, int, ColocateAsyncLoop]:
    """A 2-step long-tail run (warm-up batch, cut calls); returns each trained batch's uids and
    ``token_level_scores``, and how many rows the engine's finish hook handed to the scorer."""
    streamed = [0]
    original = ColocateAsyncLoop._stream_rows

    def counting(self, stream, flights, rows, data):
        streamed[0] += len(rows)
        return original(self, stream, flights, rows, data)

    monkeypatch.setattr(ColocateAsyncLoop, "_stream_rows", counting)
    trainer = RLTrainer(
        config=load_config(None, _overrides(run_dir, **_COLO, **_LONG_TAIL, **{"reward_model.streaming": streaming}))
    )
    loop = build_async_loop(trainer)
    scored: list = []
    update = trainer._update_stages

    def record(batch, metrics, timing):
        scored.append((list(batch.non_tensor_batch["uid"]), batch.batch["token_level_scores"].clone()))
        return update(batch, metrics, timing)

    trainer._update_stages = record
    try:
        loop.run()
    finally:
        trainer.close()
    return scored, streamed[0], loop


@pytest.mark.e2e
def test_streaming_rewards_score_each_trajectory_as_it_finishes_with_the_same_scores(tmp_path, monkeypatch):
    on, streamed_on, loop_on = _scored_run(tmp_path / "on", monkeypatch, True)
    off, streamed_off, _ = _scored_run(tmp_path / "off", monkeypatch, False)
    assert streamed_off == 0
    # every trained row and the rows of the groups left in flight were handed over while decoding
    assert streamed_on >= 2 * 8 * 4
    assert read_metrics(tmp_path / "on")[1]["colocate_async/long_tail_cut"] == 1.0  # rows scored across a cut
    assert [u for u, _ in on] == [u for u, _ in off]
    for (_, a), (_, b) in zip(on, off, strict=True):
        assert torch.equal(a, b)
    assert any(float(s.sum()) > 0 for _, s in on)  # some answers were right: the scores are not all 0
    assert assert_same_metrics(read_metrics(tmp_path / "off"), read_metrics(tmp_path / "on"), tol=1e-6) > 50
    assert loop_on.t._streaming  # the run's scorer was built (and closed with the trainer)


@pytest.mark.e2e
def test_without_an_engine_hook_nothing_is_cut_and_the_warm_up_batch_trains_one_step_later(tmp_path, monkeypatch):
    # the path of Ray workers (their engines are out of the driver's reach), run in process
    monkeypatch.setattr("verl.trainer.async_rl.colocate.local_engine", lambda wg: None)
    trainer, loop, batches = _recording_trainer(_overrides(tmp_path, **_COLO, **_LONG_TAIL))
    try:
        loop.run()
    finally:
        trainer.close()
    m = read_metrics(tmp_path)
    assert loop.engine is None
    # step 1: one call on batches 0 and 1 ran to the end; batch 0 trained, batch 1 left finished
    assert m[1]["colocate_async/long_tail_cut"] == 0.0 and m[1]["colocate_async/carried_groups"] == 0.0
    assert m[1]["colocate_async/buffer_sampleable"] == 8.0
    assert all(uid.startswith("0-") for uid in batches[0][0]) and all(uid.startswith("1-") for uid in batches[1][0])
    # step 2 trains batch 1 without generating: every token sampled by version 0, one step stale
    _, versions2, mask2, _ = batches[1]
    assert torch.equal(versions2 >= 0, mask2.bool()) and set(versions2[mask2.bool()].tolist()) == {0}
    assert m[2]["training/off_policy/trajectory_staleness/max"] == 1.0
    assert m[2]["training/off_policy/trajectory_spans/max"] == 1.0
