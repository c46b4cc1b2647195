"""Partial rollouts on the ``hf`` engine: pause at a decode-step boundary, load new weights, resume
from the prefix (KV cache rebuilt); interrupt and resubmit; per-token policy versions."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
import torch
from model_helpers import tiny_causal_lm
from torch import nn

from verl.config.schema import RolloutConfig
from verl.modules.forward import position_ids_from_attention_mask
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.partial import NOT_SAMPLED

VOCAB, R = 128, 8
PROMPTS = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33]]


def _tiny_lm(seed: int) -> nn.Module:
    return tiny_causal_lm(seed=seed, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def models() -> tuple[nn.Module, nn.Module]:
    return _tiny_lm(0), _tiny_lm(1)


def _prompts(rows: list[list[int]], seeds: list[int] | None = None) -> DataProto:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)}
    if seeds is not None:
        tensors["sample_seeds"] = torch.tensor(seeds)
    return DataProto.from_dict(
        tensors=tensors, non_tensors={"uid": np.array([f"u{i}" for i in range(len(rows))], dtype=object)}
    )


def _engine(model: nn.Module, **cfg: object) -> HFRollout:
    cfg.setdefault("response_length", R)
    cfg.setdefault("do_sample", False)
    return HFRollout(model, RolloutConfig(**cfg), eos_token_id=[VOCAB - 1], pad_token_id=0)


def _copy(model: nn.Module) -> nn.Module:
    clone = _tiny_lm(0)
    clone.load_state_dict(model.state_dict())
    return clone


def _at_boundary(engine: HFRollout, k: int, action: Callable[[], None]) -> None:
    """Run ``action`` in another thread when the decode loop reaches its k-th step boundary (after
    k sampled tokens), the way a trainer thread would, and wait there until it is done."""
    gate, real = engine._gate, engine._gate.boundary
    calls = {"n": 0}

    def boundary() -> bool:
        calls["n"] += 1
        if calls["n"] == k + 1:  # call 1 is before the prefill
            started = threading.Event()
            thread = threading.Thread(target=lambda: (started.set(), action()))
            thread.start()
            started.wait()
            while not gate.paused and not gate.interrupted and thread.is_alive():
                thread.join(0.001)
            result = real()
            thread.join()
            return result
        return real()

    gate.boundary = boundary  # type: ignore[method-assign]


def _pause_and_load(engine: HFRollout, state: dict[str, torch.Tensor], version: int) -> Callable[[], None]:
    def action() -> None:
        with engine.paused(timeout=30):
            engine.update_weights(state, version=version)

    return action


def _fresh(model: nn.Module, prompts: list[list[int]], prefix: torch.Tensor, **cfg: object) -> torch.Tensor:
    """Greedy responses of a fresh engine for prompt + prefix as the prompt."""
    rows = [p + prefix[i].tolist() for i, p in enumerate(prompts)]
    return (
        _engine(model, response_length=R - prefix.shape[1], **cfg).generate_sequences(_prompts(rows)).batch["responses"]
    )


def test_resumed_under_new_weights_equals_fresh_generation_from_the_prefix(models) -> None:
    a, b = models
    k = 3
    before = _engine(_copy(a)).generate_sequences(_prompts(PROMPTS)).batch["responses"]
    assert (before != VOCAB - 1).all()  # no row stops: every row continues past the update
    engine = _engine(_copy(a))
    _at_boundary(engine, k, _pause_and_load(engine, b.state_dict(), version=1))
    out = engine.generate_sequences(_prompts(PROMPTS))
    resp = out.batch["responses"]
    assert torch.equal(resp[:, :k], before[:, :k])  # the prefix was sampled by the old weights
    assert torch.equal(resp[:, k:], _fresh(b, PROMPTS, before[:, :k]))
    assert not torch.equal(resp, before)  # the new weights did change the continuation
    versions = out.batch["rollout_policy_versions"]
    assert versions.dtype == torch.int64 and versions.shape == (3, R)
    assert (versions[:, :k] == 0).all() and (versions[:, k:] == 1).all()
    assert out.batch["rollout_finished"].all() and out.batch["response_mask"].all()
    assert out.non_tensor_batch["min_global_steps"].tolist() == [0, 0, 0]
    assert out.non_tensor_batch["max_global_steps"].tolist() == [1, 1, 1]
    assert engine.policy_version == 1


def test_pause_without_new_weights_changes_nothing_when_sampling(models) -> None:
    a, _ = models
    batch = _prompts(PROMPTS, seeds=[7, 8, 9])
    ref = _engine(a, do_sample=True, temperature=1.0).generate_sequences(batch)
    engine = _engine(a, do_sample=True, temperature=1.0)

    # same weights under a new version number: the cache is rebuilt by a prefill, the draws go on
    def bump() -> None:
        with engine.paused(timeout=30):
            engine.set_policy_version(5)

    _at_boundary(engine, 4, bump)
    out = engine.generate_sequences(batch)
    assert torch.equal(out.batch["responses"], ref.batch["responses"])
    torch.testing.assert_close(out.batch["rollout_log_probs"], ref.batch["rollout_log_probs"], atol=1e-5, rtol=0)
    v = out.batch["rollout_policy_versions"]
    valid = out.batch["response_mask"].bool()
    assert torch.equal(v >= 0, valid)
    assert (v[:, :4][valid[:, :4]] == 0).all() and (v[:, 4:][valid[:, 4:]] == 5).all()


def test_interrupt_then_resubmit_continues_each_row_from_its_prefix(models) -> None:
    a, b = models
    engine = _engine(_copy(a))
    _at_boundary(engine, 2, engine.interrupt)
    part = engine.generate_sequences(_prompts(PROMPTS))
    assert not part.batch["rollout_finished"].any()
    assert part.batch["response_mask"].sum(1).tolist() == [2, 2, 2]
    assert (part.batch["rollout_policy_versions"][:, 2:] == NOT_SAMPLED).all()
    # a second partial batch with longer prefixes: one resubmitted batch mixes prefix lengths
    other = _engine(_copy(a))
    _at_boundary(other, 5, other.interrupt)
    part5 = other.generate_sequences(_prompts(PROMPTS[:2]))
    mixed = DataProto.concat([part, part5])
    engine = _engine(_copy(a))
    engine.update_weights(b.state_dict(), version=1)  # idle: no pause needed
    out = engine.generate_sequences(mixed)
    resp = out.batch["responses"]
    base = part.batch["responses"]
    assert torch.equal(resp[:3, :2], base[:, :2])
    assert torch.equal(resp[:3, 2:], _fresh(b, PROMPTS, base[:, :2]))
    assert torch.equal(resp[3:, 5:], _fresh(b, PROMPTS[:2], part5.batch["responses"][:, :5]))
    v = out.batch["rollout_policy_versions"]
    assert (v[:3, :2] == 0).all() and (v[:3, 2:] == 1).all() and (v[3:, :5] == 0).all() and (v[3:, 5:] == 1).all()
    assert out.batch["rollout_finished"].all()
    # finished rows pass through a resubmission untouched
    again = engine.generate_sequences(out)
    assert torch.equal(again.batch["responses"], resp) and torch.equal(again.batch["rollout_policy_versions"], v)


def test_weights_never_change_under_a_running_decode_loop(models) -> None:
    a, b = models
    engine = _engine(_copy(a))
    errors: list[Exception] = []

    def load_without_pause() -> None:
        try:
            engine.update_weights(b.state_dict(), version=1)
        except RuntimeError as e:
            errors.append(e)

    _at_boundary(engine, 2, load_without_pause)
    out = engine.generate_sequences(_prompts(PROMPTS))
    assert len(errors) == 1 and "pause" in str(errors[0])
    assert torch.equal(out.batch["responses"], _engine(a).generate_sequences(_prompts(PROMPTS)).batch["responses"])
    assert (out.batch["rollout_policy_versions"][out.batch["response_mask"].bool()] == 0).all()
    with pytest.raises(RuntimeError, match="pause"):  # idle engine: loading is fine, then a parked loop ...
        engine._gate._active = 1  # a loop that is running, not parked
        try:
            engine.set_policy_version(3)
        finally:
            engine._gate._active = 0


def test_gate_pause_times_out_without_a_boundary_and_version_bounds_by_hand() -> None:
    from verl.workers.rollout.partial import RolloutGate, version_bounds

    gate = RolloutGate()
    gate.pause(timeout=0.01)  # idle: returns at once
    gate.resume()
    with gate.decoding():  # a loop inside a forward that never reaches a boundary
        with pytest.raises(TimeoutError):
            gate.pause(timeout=0.05)
        assert not gate.paused and gate.boundary()  # resumed again: the loop goes on
    gate.interrupt()
    assert not gate.boundary()
    gate.clear_interrupt()
    assert gate.boundary()
    lo, hi = version_bounds(torch.tensor([[0, 1, 1, -1], [2, 2, -1, -1], [-1, -1, -1, -1]]), default=7)
    assert lo.tolist() == [0, 2, 7] and hi.tolist() == [1, 2, 7]


def test_rollout_worker_bucketed_sync_during_generation_is_a_partial_rollout(models) -> None:
    """The split pool's sync (begin / load buckets in place / finish) from another thread while
    the rollout worker generates: the generation parks, continues under the new weights."""
    from verl.config.schema import ActorRolloutRefConfig
    from verl.workers.rollout_worker import RolloutWorker

    a, b = models
    engine = _engine(_copy(a))
    worker = RolloutWorker(ActorRolloutRefConfig())
    worker.engine = worker.rollout = engine
    worker.module, worker.synced_once = engine.module, True
    state = list(b.state_dict().items())

    def sync() -> None:
        worker.begin_weight_update(policy_version=4)
        for k in range(0, len(state), 5):
            worker.load_weight_bucket(state[k : k + 5])
        worker.finish_weight_update()

    _at_boundary(engine, 3, sync)
    out = worker.generate_sequences(_prompts(PROMPTS))
    before = _engine(_copy(a)).generate_sequences(_prompts(PROMPTS)).batch["responses"]
    resp, v = out.batch["responses"], out.batch["rollout_policy_versions"]
    assert torch.equal(resp[:, :3], before[:, :3])
    assert torch.equal(resp[:, 3:], _fresh(b, PROMPTS, before[:, :3]))
    assert (v[:, :3] == 0).all() and (v[:, 3:] == 4).all() and engine.policy_version == worker.policy_version == 4
