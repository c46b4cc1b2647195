"""Partial rollouts on the vLLM engine: a continuation resubmits prompt + prefix as prompt tokens;
the async engine aborts its requests at a pause and resubmits them at resume (versions per token).

The first two tests drive `VLLMRollout` / `VLLMAsyncTokenEngine` with stand-ins for vLLM (they run
without it); the last one needs vLLM (``-m vllm``)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS, head32_random_model
from verl.config.schema import RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout.vllm import vllm_rollout
from verl.workers.rollout.partial import NOT_SAMPLED
from verl.workers.rollout.vllm.vllm_async import VLLMAsyncTokenEngine
from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout

R = 8


def _next(context: list[int]) -> int:
    """The stand-in model: a deterministic function of the context (like greedy decoding)."""
    return (sum(context) * 7 + len(context)) % 50 + 3


class _Params:
    def __init__(self, max_tokens: int, seed: int | None = None) -> None:
        self.max_tokens, self.seed = max_tokens, seed

    def clone(self) -> _Params:
        return _Params(self.max_tokens, self.seed)


def _out(ids: list[int], reason: str | None) -> Any:
    return SimpleNamespace(
        outputs=[SimpleNamespace(token_ids=list(ids), logprobs=None, finish_reason=reason)], prompt_logprobs=None
    )


class _OfflineBackend:
    """`run_batch` of the offline engine: greedy continuation of each prompt, to max_tokens."""

    def __init__(self) -> None:
        self.weights = SimpleNamespace(synced=True)
        self.calls: list[tuple[list[int], int]] = []

    def run_batch(self, prompts: list[list[int]], params: list[Any], lora_request: Any = None) -> list[Any]:
        outs = []
        for prompt, p in zip(prompts, params, strict=True):
            self.calls.append((list(prompt), p.max_tokens))
            ids: list[int] = []
            for _ in range(p.max_tokens):
                ids.append(_next(prompt + ids))
            outs.append(_out(ids, "length"))
        return outs


def _offline_rollout(monkeypatch: pytest.MonkeyPatch) -> tuple[VLLMRollout, _OfflineBackend]:
    monkeypatch.setattr(
        vllm_rollout, "vllm_sampling_params", lambda params, max_tokens, *a, **k: _Params(max_tokens, a[1])
    )
    rollout = VLLMRollout.__new__(VLLMRollout)
    backend = _OfflineBackend()
    rollout.__dict__.update(
        config=RolloutConfig(response_length=R, calculate_log_probs=True),
        serve_async=False,
        backend=backend,
        weights=backend.weights,
        stop_strings=None,
        eos_token_id=[99],
        pad_token_id=0,
        sleep_supported=False,
        sleeping=False,
        policy_version=2,
        _generation=threading.Lock(),
        _paused=False,
    )
    return rollout, backend


def _partial(prompts: list[list[int]], prefixes: list[list[int]], finished: list[bool]) -> DataProto:
    """A partial output (as the hf engine returns it when interrupted) with version-0 prefixes."""
    width, n = max(map(len, prompts)), len(prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    pmask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    resp = torch.zeros(n, R, dtype=torch.long)
    rmask = torch.zeros(n, R, dtype=torch.long)
    versions = torch.full((n, R), NOT_SAMPLED)
    for i, pre in enumerate(prefixes):
        resp[i, : len(pre)], rmask[i, : len(pre)], versions[i, : len(pre)] = torch.tensor(pre), 1, 0
    mask = torch.cat([pmask, rmask], 1)
    return DataProto.from_dict(
        tensors={
            "prompts": ids,
            "responses": resp,
            "response_mask": rmask,
            "input_ids": torch.cat([ids, resp], 1),
            "attention_mask": mask,
            "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
            "rollout_log_probs": torch.zeros(n, R),
            "rollout_policy_versions": versions,
            "rollout_finished": torch.tensor(finished),
        },
        non_tensors={"uid": np.array(["a", "b", "c"][:n], dtype=object)},
    )


def test_offline_continuation_resubmits_the_prefix_as_prompt_tokens(monkeypatch) -> None:
    rollout, backend = _offline_rollout(monkeypatch)
    prompts = [[11, 12], [21, 22, 23], [31]]
    prefixes = [[5, 6], [7], [8, 9, 10, 11, 12, 13, 14, 15]]  # the last row is full: nothing to generate
    out = rollout.generate_sequences(_partial(prompts, prefixes, [False, False, True]))
    assert backend.calls == [([11, 12, 5, 6], R - 2), ([21, 22, 23, 7], R - 1)]
    for i, (p, pre) in enumerate(zip(prompts, prefixes, strict=True)):
        full = list(pre)
        while len(full) < R:
            full.append(_next(p + full))
        assert out.batch["responses"][i].tolist() == full  # = one uninterrupted greedy run
    v = out.batch["rollout_policy_versions"]
    assert v[0].tolist() == [0, 0] + [2] * (R - 2) and v[1].tolist() == [0] + [2] * (R - 1) and (v[2] == 0).all()
    assert out.batch["rollout_finished"].all() and out.batch["response_mask"].all()
    assert out.non_tensor_batch["max_global_steps"].tolist() == [2, 2, 0]
    rollout.pause()  # offline: waits for the call in progress, holds the next one until resume
    blocked = threading.Thread(target=rollout.generate_sequences, args=(_partial(prompts[:1], [[]], [False]),))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()
    rollout.resume()
    blocked.join(10)
    assert not blocked.is_alive()
    with pytest.raises(ValueError, match="offline"):
        rollout.interrupt()


class _FakeAsyncLLM:
    """`AsyncLLM.generate` / `abort` as the engine uses them: cumulative outputs, a final one with
    finish reason ``abort`` for an aborted request. The first request stalls after 3 tokens until
    it is aborted, so the test pauses at a known point."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], int]] = []
        self.aborted: set[str] = set()

    async def generate(self, prompt: dict[str, Any], params: Any, request_id: str, lora_request: Any = None) -> Any:
        context = list(prompt["prompt_token_ids"])
        first = not self.calls
        self.calls.append((context, params.max_tokens))
        ids: list[int] = []
        while len(ids) < params.max_tokens:
            if request_id in self.aborted:
                yield _out(ids, "abort")
                return
            if first and len(ids) == 3:
                await asyncio.sleep(0.005)
                continue
            ids.append(_next(context + ids))
            yield _out(ids, "length" if len(ids) == params.max_tokens else None)

    async def abort(self, request_ids: list[str]) -> None:
        self.aborted.update(request_ids)


def _async_engine() -> VLLMAsyncTokenEngine:
    eng = VLLMAsyncTokenEngine.__new__(VLLMAsyncTokenEngine)
    eng._loop = asyncio.new_event_loop()
    eng._thread = threading.Thread(target=eng._loop.run_forever, daemon=True)
    eng._thread.start()
    import itertools

    eng.__dict__.update(
        engine=_FakeAsyncLLM(),
        weights=SimpleNamespace(synced=True, lora_request=lambda: None),
        _ids=itertools.count(),
        in_flight=0,
        max_in_flight=0,
        policy_version=0,
        _live=set(),
        _interrupted=False,
    )
    eng._resumed = asyncio.Event()
    eng._resumed.set()
    return eng


def test_async_engine_pause_aborts_and_resume_resubmits_the_prefix() -> None:
    eng = _async_engine()
    prompt = [4, 5, 6]
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.extend(eng.run_batch([prompt], [_Params(R, seed=3)])))
    worker.start()
    while not eng.engine.calls or not eng._live:
        time.sleep(0.005)
    time.sleep(0.05)  # the first request has its 3 tokens and stalls
    eng.pause()
    eng.policy_version = 1  # the weights load here
    eng.resume()
    worker.join(10)
    completion = result[0].outputs[0]
    uninterrupted = []
    while len(uninterrupted) < R:
        uninterrupted.append(_next(prompt + uninterrupted))
    assert completion.token_ids == uninterrupted and completion.finish_reason == "length"
    assert completion.policy_versions == [0, 0, 0] + [1] * (R - 3)
    (ctx0, n0), (ctx1, n1) = eng.engine.calls
    assert (ctx0, n0) == (prompt, R) and ctx1 == prompt + uninterrupted[:3] and n1 == R - 3
    eng._loop.call_soon_threadsafe(eng._loop.stop)


def _marked(fn: Any) -> Any:
    for mark in VLLM_MARKS:
        fn = mark(fn)
    return fn


@_marked
def test_vllm_async_engine_partial_rollout_spans_versions(shared_dir, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok_dir = shared_dir / "tokenizers" / "qwen2.5"
    model = AutoModelForCausalLM.from_pretrained(
        head32_random_model("qwen2", tok_dir, tmp_path / "m"), dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = RolloutConfig(
        name="vllm", response_length=64, prompt_length=16, do_sample=False, mode="async", ignore_eos=True
    )
    engine = vllm_rollout.build(model, cfg, tok)
    try:
        engine.update_weights(model)
        ids = torch.tensor([[tok.pad_token_id] * 12 + [11, 12, 13, 14]] * 2)
        batch = DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": (ids != tok.pad_token_id).long()})
        out: list[DataProto] = []
        worker = threading.Thread(target=lambda: out.append(engine.generate_sequences(batch)))
        worker.start()
        time.sleep(0.5)
        engine.pause()
        engine.update_weights(model, version=1)
        engine.resume()
        worker.join(120)
        v, mask = out[0].batch["rollout_policy_versions"], out[0].batch["response_mask"]
        assert torch.equal(v >= 0, mask.bool()) and out[0].batch["rollout_finished"].all()
        assert set(v[mask.bool()].tolist()) <= {0, 1}
    finally:
        engine.close()


@_marked
def test_vllm_partial_rollout_resumed_under_new_weights_equals_a_fresh_generation_from_its_prefix(
    shared_dir, tmp_path
) -> None:
    """Greedy, real vLLM: the tokens a trajectory generates after a pause + weight update (version 1) equal a fresh
    generation from prompt + its version-0 prefix with the new weights."""
    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok_dir = shared_dir / "tokenizers" / "qwen2.5"
    old = AutoModelForCausalLM.from_pretrained(
        head32_random_model("qwen2", tok_dir, tmp_path / "m"), dtype=torch.float32
    )

    def shake(model: torch.nn.Module, seed: int) -> None:
        """Large noise on the decoder blocks: the random model's (tied) embeddings alone only copy the last token."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.model.layers.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))

    shake(old, 0)
    new = copy.deepcopy(old)
    shake(new, 1)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    R_LONG, pad = 48, tok.pad_token_id
    cfg = RolloutConfig(
        name="vllm", response_length=R_LONG, prompt_length=R_LONG + 8, do_sample=False, mode="async", ignore_eos=True
    )
    prompt = [11, 12, 13, 14]
    engine = vllm_rollout.build(old, cfg, tok)

    def batch(rows: list[list[int]]) -> DataProto:
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        return DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": (ids != pad).long()})

    try:
        split = None
        for wait_s in (0.5, 0.2, 1.5, 3.0):  # pause somewhere inside the response (the machine's speed varies)
            engine.update_weights(old, version=0)
            out: list[DataProto] = []
            worker = threading.Thread(target=lambda out=out: out.append(engine.generate_sequences(batch([prompt]))))
            worker.start()
            time.sleep(wait_s)
            engine.pause()
            engine.update_weights(new, version=1)
            engine.resume()
            worker.join(300)
            v = out[0].batch["rollout_policy_versions"][0]
            k = int((v == 0).sum())
            if 0 < k < R_LONG:
                split = (out[0].batch["responses"][0].tolist(), v.tolist(), k)
                break
        assert split is not None, "no pause landed inside the response"
        tokens, versions, k = split
        assert versions == [0] * k + [1] * (R_LONG - k) and len(set(tokens)) > 2  # a path, not one repeated token
        fresh = engine.generate_sequences(batch([prompt + tokens[:k]]))
        assert fresh.batch["responses"][0].tolist()[: R_LONG - k] == tokens[k:]
        whole_old = engine.generate_sequences(batch([prompt]))  # the new weights matter: version 1 decodes otherwise
        assert whole_old.batch["responses"][0].tolist() != tokens
    finally:
        engine.close()
