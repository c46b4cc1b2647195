"""Agent loops on vLLM (async server mode): ``rollout.name=vllm`` with agent loops (CPU build).

- concurrency: requests in flight together in vLLM's async engine give, greedy in fp32, the same
  tokens as the same requests run one at a time (and seeded sampling too);
- a multi-turn trajectory (model turns + user turns of an interaction) after a weight update:
  the engine's log-probs of the model tokens equal the actor's recomputed ones;
- single-turn batches give the same tokens through the agent loops and through the batched
  ``generate_sequences`` of the same (one) engine; ``calculate_log_probs=false`` drops them.

Run: ``VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_agent_loop.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import torch

from tests.workers.rollout.agent_loop.agent_helpers import RetryOnceInteraction
from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS, head32_random_model
from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.modules.forward import compute_log_probs
from verl.protocol import DataProto

pytestmark = [
    *VLLM_MARKS,
]

R, P = 96, 64
TOL = 1e-3  # fp32 engine vs fp32 training forward (measured ~1e-5)


@pytest.fixture(scope="module")
def model_and_tok(shared_dir, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("qwen_h32_agent")
    tok_dir = shared_dir / "tokenizers" / "qwen2.5"
    head32_random_model("qwen2", tok_dir, out)
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(tok_dir)


@pytest.fixture(scope="module")
def interaction_yaml(tmp_path_factory):
    yaml = tmp_path_factory.mktemp("interaction") / "interaction.yaml"
    yaml.write_text(
        f"interaction:\n  - name: retry\n    class_name: {RetryOnceInteraction.__module__}.RetryOnceInteraction\n"
        "    config: {}\n"
    )
    return yaml


@pytest.fixture(scope="module")
def rollout(model_and_tok, interaction_yaml):
    """``build_rollout_engine`` for a multi-turn vllm config, wrapped in the agent-loop manager."""
    from verl.workers.rollout import build_rollout_engine
    from verl.workers.rollout.agent_loop import wrap_rollout_engine

    model, tok = model_and_tok
    cfg = RolloutConfig(
        name="vllm",
        response_length=R,
        prompt_length=P,
        temperature=1.0,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        seed=3,
        multi_turn=MultiTurnConfig(
            enable=True,
            interaction_config_path=str(interaction_yaml),
            max_user_turns=2,
            tokenization_sanity_check_mode="disable",
        ),
    )
    engine = build_rollout_engine(model, cfg, tok)
    try:
        engine.update_weights(model)
        yield wrap_rollout_engine(engine, cfg, tok)
    finally:
        engine.close()


def _multi_turn_batch(tok, n: int = 3) -> DataProto:
    raw = np.empty(n, dtype=object)
    for i in range(n):
        raw[i] = [{"role": "user", "content": f"Question {i}: what is {i}+{i}?"}]
    ids = torch.zeros(n, 4, dtype=torch.long)  # tool_agent renders its prompt from the messages
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(4).repeat(n, 1),
            "sample_seeds": torch.arange(11, 11 + n),
        },
        non_tensors={
            "raw_prompt": raw,
            "extra_info": np.array([{"index": i, "interaction_kwargs": {"name": "retry"}} for i in range(n)]),
            "agent_name": np.array(["tool_agent"] * n, dtype=object),
        },
        # many stop ids so the random model ends its turns early and the interaction answers
        meta_info={"pad_token_id": tok.pad_token_id, "eos_token_id": list(range(0, 151643, 11))},
    )


def _single_turn_batch(tok, agent: str | None) -> DataProto:
    g = torch.Generator().manual_seed(1)
    lengths = (5, 12, 3, 8)
    ids = torch.full((len(lengths), P), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, P - n :] = torch.randint(0, 150000, (n,), generator=g)
        mask[i, P - n :] = 1
    non_tensors = {"agent_name": np.array([agent] * len(lengths), dtype=object)} if agent else {}
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "sample_seeds": torch.arange(100, 100 + len(lengths)),
        },
        non_tensors=non_tensors,
        meta_info={"pad_token_id": tok.pad_token_id, "eos_token_id": list(range(0, 151643, 7))},
    )


def test_build_picks_the_async_engine_and_it_serves_the_agent_loops(rollout) -> None:
    from verl.workers.rollout.hf.hf_server import as_token_engine
    from verl.workers.rollout.vllm.vllm_async import VLLMAsyncTokenEngine

    inner = rollout.engine
    assert inner.serve_async and inner.llm is None  # one engine: the async one
    assert isinstance(as_token_engine(inner), VLLMAsyncTokenEngine) and as_token_engine(inner) is inner.backend


def test_concurrent_requests_equal_one_at_a_time(rollout, model_and_tok) -> None:
    from verl.workers.rollout.request import TokenRequest
    from verl.workers.rollout.sampling import SamplingParams

    server = rollout.engine.token_engine()
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 150000, (n,), generator=g).tolist() for n in (3, 9, 5, 17, 2, 11, 7, 13)]
    greedy = [
        TokenRequest(prompt_ids=p, sampling=SamplingParams(do_sample=False), max_new_tokens=12 + i, request_id=f"g{i}")
        for i, p in enumerate(prompts)
    ]
    sampled = [
        TokenRequest(prompt_ids=p, sampling=SamplingParams(temperature=1.0), max_new_tokens=12, seed=50 + i)
        for i, p in enumerate(prompts)
    ]
    requests = greedy + sampled

    async def together():
        return await asyncio.gather(*(server.generate(r) for r in requests))

    async def one_at_a_time():
        return [await server.generate(r) for r in requests]

    server.max_in_flight = 0
    concurrent = asyncio.run(together())
    assert server.max_in_flight == len(requests)  # all were in vLLM's engine at once
    server.max_in_flight = 0
    alone = asyncio.run(one_at_a_time())
    assert server.max_in_flight == 1
    for a, b in zip(concurrent, alone, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        torch.testing.assert_close(torch.tensor(a.log_probs), torch.tensor(b.log_probs), atol=1e-4, rtol=0)
    assert [len(o.token_ids) for o in concurrent[:8]] == [r.max_new_tokens for r in greedy]  # random model: no stop
    assert len({tuple(o.token_ids) for o in concurrent}) == len(requests)


def _perturb(model, seed: int) -> None:
    """Stand-in for an optimizer step: every weight moves."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)


def test_multi_turn_log_probs_equal_the_actor_after_an_update(rollout, model_and_tok) -> None:
    model, tok = model_and_tok
    before = rollout.generate_sequences(_multi_turn_batch(tok))
    _perturb(model, 0)
    rollout.update_weights(model)
    assert rollout.engine.weights.last_tensors == len(model.state_dict()) and rollout.engine.last_update_s > 0
    out = rollout.generate_sequences(_multi_turn_batch(tok))
    b = out.batch
    mask, attn = b["response_mask"], b["attention_mask"][:, -R:]
    assert max(out.non_tensor_batch["num_turns"]) > 1 and bool(((attn - mask) == 1).any())  # user turns in the response
    assert bool((mask <= attn).all()) and (b["rollout_log_probs"][mask == 0] == 0).all()
    with torch.no_grad():
        actor = compute_log_probs(model, b["input_ids"], b["attention_mask"], b["position_ids"], R, temperature=1.0)
    diff = float(((actor - b["rollout_log_probs"]) * mask).abs().max())
    print(
        f"multi-turn trajectories: engine vs actor max |log-prob diff| on {int(mask.sum())} model tokens = {diff:.2e}"
    )
    assert diff <= TOL, diff
    assert not torch.equal(out.batch["responses"], before.batch["responses"])  # the new weights generate


def test_single_turn_same_tokens_through_agent_loops_and_batched(rollout, model_and_tok) -> None:
    _, tok = model_and_tok
    batched = rollout.engine.generate_sequences(_single_turn_batch(tok, None))  # all rows submitted at once
    looped = rollout.generate_sequences(_single_turn_batch(tok, "single_turn_agent"))  # multi_turn on: agent loops
    assert "num_turns" in looped.non_tensor_batch
    for key in ("responses", "response_mask", "attention_mask", "input_ids", "position_ids"):
        assert torch.equal(batched.batch[key], looped.batch[key]), key
    torch.testing.assert_close(batched.batch["rollout_log_probs"], looped.batch["rollout_log_probs"], atol=1e-5, rtol=0)
    inner = rollout.engine
    no_lp = dataclasses.replace(inner.config, calculate_log_probs=False)
    inner.config = inner.backend.config = no_lp
    try:
        out = rollout.generate_sequences(_single_turn_batch(tok, "single_turn_agent"))
        assert "rollout_log_probs" not in out.batch.keys() and torch.equal(
            out.batch["responses"], looped.batch["responses"]
        )
    finally:
        inner.config = inner.backend.config = dataclasses.replace(no_lp, calculate_log_probs=True)
