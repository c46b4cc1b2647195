"""The ``vllm`` rollout engine (CPU build) against the actor and the ``hf`` engine.

Run: ``VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_rollout.py tests/workers/rollout/vllm/test_vllm_e2e.py``.
Skipped (with the reason) when vLLM is not installed. The tiny model has head size 32: vLLM's
CPU attention kernels support head sizes {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
from model_helpers import tiny_vllm_lm
from torch import nn

from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS
from verl.config.compat.schema_verl import CheckpointEngineConfig
from verl.config.schema import RolloutConfig
from verl.modules.forward import compute_log_probs
from verl.protocol import DataProto

pytestmark = [
    *VLLM_MARKS,
]

VOCAB, P, R = 128, 12, 8
TOL = 1e-3  # fp32 engine vs fp32 training forward; measured ~1e-5


def _tiny_lm(seed: int = 0) -> nn.Module:
    return tiny_vllm_lm(seed, VOCAB)


def _config(**kw) -> RolloutConfig:
    base = dict(
        name="vllm",
        prompt_length=P,
        response_length=R,
        max_num_seqs=64,
        max_num_batched_tokens=512,
        enable_prefix_caching=True,
        enable_chunked_prefill=True,
        seed=3,
        engine_kwargs={"vllm": {"kv_cache_dtype": "auto"}},
    )
    base.update(kw)
    return RolloutConfig(**base)


def _prompts(lengths=(5, 12, 3, 8), seeds=True) -> DataProto:
    g = torch.Generator().manual_seed(1)
    ids = torch.zeros(len(lengths), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, P - n :] = torch.randint(3, VOCAB, (n,), generator=g)
        mask[i, P - n :] = 1
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    if seeds:
        tensors["sample_seeds"] = torch.arange(100, 100 + len(lengths))
    return DataProto.from_dict(tensors=tensors)


def _perturb(model: nn.Module, seed: int) -> None:
    """Stand-in for an optimizer step: every weight moves."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


@pytest.fixture(scope="module")
def lm() -> nn.Module:
    return _tiny_lm()


@pytest.fixture(scope="module")
def engine(lm):
    from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout

    eng = VLLMRollout(lm, _config(), None)
    eng.update_weights(lm)
    yield eng
    eng.close()


def _max_diff(model, out: DataProto) -> float:
    b = out.batch
    lp = compute_log_probs(model, b["input_ids"], b["attention_mask"], b["position_ids"], R, temperature=1.0)
    return float(((lp - b["rollout_log_probs"]) * b["response_mask"]).abs().max())


def test_rollout_keys_reach_vllm(engine) -> None:
    vc = engine.llm.llm_engine.vllm_config
    assert vc.scheduler_config.max_num_batched_tokens == 512 and vc.scheduler_config.max_num_seqs == 64
    assert vc.cache_config.enable_prefix_caching and vc.scheduler_config.enable_chunked_prefill
    assert vc.model_config.seed == 3 and vc.model_config.dtype == torch.float32
    assert vc.model_config.max_model_len == P + R and vc.model_config.logprobs_mode == "processed_logprobs"


def test_logprobs_equal_actor_after_each_update(engine, lm) -> None:
    fixed = list(range(4, 4 + P + R - 1))  # + the one token score() asks vLLM for = max_model_len
    before = engine.generate_sequences(_prompts()).batch["responses"]
    for step in range(3):
        _perturb(lm, step)
        engine.update_weights(lm)
        actor = compute_log_probs(
            lm,
            torch.tensor([fixed]),
            torch.ones(1, len(fixed), dtype=torch.long),
            torch.arange(len(fixed))[None],
            len(fixed) - 1,
            temperature=1.0,
        )[0]
        assert (engine.score(fixed) - actor).abs().max() <= TOL
        out = engine.generate_sequences(_prompts())
        assert _max_diff(lm, out) <= TOL
        assert not torch.equal(out.batch["responses"], before)  # the engine really generates with new weights
        before = out.batch["responses"]
    assert engine.last_update_s > 0 and engine.weights.last_tensors == len(lm.state_dict())


def test_greedy_matches_hf_engine_layout_and_tokens(engine, lm) -> None:
    from verl.workers.rollout import HFRollout

    hf = HFRollout(lm, _config(name="hf"), None)
    meta = {"do_sample": False}
    ref = hf.generate_sequences(DataProto.from_dict(tensors=dict(_prompts(seeds=False).batch.items()), meta_info=meta))
    stop = int(torch.mode(ref.batch["responses"][:, 1:].flatten()).values)  # a token greedy decoding emits
    meta["eos_token_id"] = [stop]
    ref = hf.generate_sequences(DataProto.from_dict(tensors=dict(_prompts(seeds=False).batch.items()), meta_info=meta))
    out = engine.generate_sequences(
        DataProto.from_dict(tensors=dict(_prompts(seeds=False).batch.items()), meta_info=meta)
    )
    assert set(out.batch.keys()) == set(ref.batch.keys())
    for key in ref.batch.keys():
        assert out.batch[key].shape == ref.batch[key].shape and out.batch[key].dtype == ref.batch[key].dtype, key
        if key != "rollout_log_probs":
            assert torch.equal(out.batch[key], ref.batch[key]), key
    assert (ref.batch["response_mask"].sum(-1) < R).any()  # some rows stopped early on the stop id
    torch.testing.assert_close(out.batch["rollout_log_probs"], ref.batch["rollout_log_probs"], atol=TOL, rtol=0)
    assert out.meta_info["temperature"] == 1.0 and out.meta_info["eos_token_id"] == [stop]


def test_row_seeds_make_rows_independent_of_batching(engine) -> None:
    full = engine.generate_sequences(_prompts()).batch["responses"]
    again = engine.generate_sequences(_prompts()).batch["responses"]
    assert torch.equal(full, again)
    batch = _prompts()
    alone = engine.generate_sequences(batch[2:3]).batch["responses"]
    assert torch.equal(alone[0], full[2])


def test_sampling_keys_and_calculate_log_probs(engine, lm) -> None:
    hot = engine.generate_sequences(
        DataProto.from_dict(tensors=dict(_prompts().batch.items()), meta_info={"temperature": 2.0})
    )
    assert hot.meta_info["temperature"] == 2.0
    b = hot.batch
    lp = compute_log_probs(lm, b["input_ids"], b["attention_mask"], b["position_ids"], R, temperature=2.0)
    assert float(((lp - b["rollout_log_probs"]) * b["response_mask"]).abs().max()) <= TOL
    engine.config = dataclasses.replace(engine.config, calculate_log_probs=False)
    try:
        assert "rollout_log_probs" not in engine.generate_sequences(_prompts()).batch.keys()
    finally:
        engine.config = dataclasses.replace(engine.config, calculate_log_probs=True)


def test_keys_vllm_cannot_honour_are_one_line_errors(lm) -> None:
    from verl.workers.rollout.vllm.vllm_config import engine_args

    cases = [
        (dict(tensor_model_parallel_size=2), "tensor_model_parallel_size is not supported yet with rollout.name=vllm"),
        (dict(load_format="pt"), "load_format is not supported yet"),
        (dict(engine_kwargs={"cache_implementation": "static"}), "engine_kwargs.cache_implementation"),
        (dict(engine_kwargs={"vllm": {"swap_spaces": 1}}), "engine_kwargs.vllm.swap_spaces"),
        (dict(dtype="int8"), "dtype is not supported yet"),
    ]
    for kw, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            engine_args(_config(**kw), lm)
        assert "\n" not in str(err.value)
    args = engine_args(_config(engine_kwargs={"vllm": {"max_logprobs": 7}}, dtype="bf16"), lm)
    assert args["max_logprobs"] == 7 and args["dtype"] == "bfloat16" and args["load_format"] == "dummy"


def test_generate_before_weights_is_an_error(engine, lm) -> None:
    from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout

    with pytest.raises(RuntimeError, match="already runs in this process"):
        VLLMRollout(lm, _config(), None)  # the module's engine is in-process
    eng = VLLMRollout(
        lm,
        _config(load_format="auto", checkpoint_engine=CheckpointEngineConfig(update_weights_bucket_megabytes=1)),
        None,
        in_process=False,
    )  # engine core in a child process
    try:
        assert eng.weights.bucket_bytes == 2**20  # rollout.checkpoint_engine.update_weights_bucket_megabytes
        with pytest.raises(RuntimeError, match="before update_weights"):
            eng.generate_sequences(_prompts())
        eng.update_weights(dict(lm.state_dict()))  # a plain state dict works too
        assert _max_diff(lm, eng.generate_sequences(_prompts())) <= TOL
    finally:
        eng.close()


def test_async_engine_serves_concurrent_requests_like_the_sync_engine(engine, lm) -> None:
    from verl.workers.rollout.request import TokenRequest
    from verl.workers.rollout.sampling import SamplingParams
    from verl.workers.rollout.vllm.vllm_async import VLLMAsyncTokenEngine

    batch = _prompts()
    sync_out = engine.generate_sequences(batch).batch
    eng = VLLMAsyncTokenEngine(
        lm, _config(checkpoint_engine=CheckpointEngineConfig(update_weights_bucket_megabytes=3)), None
    )
    try:
        assert eng.weights.bucket_bytes == 3 * 2**20
        eng.update_weights(lm)
        requests = [
            TokenRequest(prompt_ids=ids[m.bool()].tolist(), sampling=SamplingParams(), max_new_tokens=R, seed=int(s))
            for ids, m, s in zip(batch.batch["input_ids"], batch.batch["attention_mask"], batch.batch["sample_seeds"])
        ]

        async def run():
            return await asyncio.gather(*(eng.generate(r) for r in requests))

        outs = asyncio.run(run())
    finally:
        eng.close()
    for i, out in enumerate(outs):
        n = int(sync_out["response_mask"][i].sum())
        assert out.token_ids == sync_out["responses"][i, :n].tolist()
        torch.testing.assert_close(torch.tensor(out.log_probs), sync_out["rollout_log_probs"][i, :n], atol=TOL, rtol=0)
        assert out.finish_reason == ("length" if n == R else "stop")


def test_lora_syncs_only_the_adapter(engine) -> None:
    from peft import LoraConfig, get_peft_model

    from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout, lora_rank_of

    lm = get_peft_model(
        _tiny_lm(seed=1), LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "gate_proj"])
    )
    assert lora_rank_of(lm) == 8  # vLLM's slot sizes: 1, 8, 16, ...
    adapter = {n: p for n, p in lm.named_parameters() if "lora_" in n}
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapter.values())
    eng = VLLMRollout(lm, _config(), None, in_process=False)  # the module's engine holds this process
    try:
        eng.update_weights(lm)  # first sync: base weights + adapter
        assert eng.weights.last_tensors == len(lm.state_dict())
        fixed = list(range(4, 4 + P + R - 1))
        ids, ones, pos = (
            torch.tensor([fixed]),
            torch.ones(1, len(fixed), dtype=torch.long),
            torch.arange(len(fixed))[None],
        )
        for _ in range(2):  # an update trains only the adapter
            with torch.no_grad():
                for p in adapter.values():
                    p.add_(torch.randn(p.shape) * 0.3)
            eng.update_weights(lm)
            assert eng.weights.last_tensors == len(adapter) and eng.weights.last_bytes == adapter_bytes
            actor = compute_log_probs(lm, ids, ones, pos, len(fixed) - 1, temperature=1.0)[0]
            with lm.disable_adapter():
                base = compute_log_probs(lm, ids, ones, pos, len(fixed) - 1, temperature=1.0)[0]
            scored = eng.score(fixed)
            assert (scored - actor).abs().max() <= TOL
            assert (scored - base).abs().max() > 0.1  # the adapter really is applied
            assert _max_diff(lm, eng.generate_sequences(_prompts())) <= TOL
    finally:
        eng.close()
