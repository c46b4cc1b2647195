"""The ``hf`` engine behind the token-level request API, and ``single_turn_agent``.

- a request's tokens and log-probs are identical alone and batched with other requests;
- ``single_turn_agent`` through the request API reproduces ``HFRollout.generate_sequences``
  exactly (responses, masks, rollout_log_probs) on the quick-start model and data.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from verl.config.schema import ModelConfig, RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.hf.hf_server import HFTokenServer
from verl.workers.rollout.request import TokenRequest
from verl.workers.rollout.sampling import SamplingParams
from verl.workers.rollout.trajectories import agent_loop_metrics


@pytest.fixture(scope="module")
def quickstart():
    from verl.modules import create_model, load_tokenizer

    torch.manual_seed(0)
    model = create_model("actor", ModelConfig(), device="cpu")
    return model, load_tokenizer(ModelConfig().path)


def _prompt_batch(tok, n: int = 6, width: int = 24) -> DataProto:
    from verl.data.rl_dataset import left_pad

    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": f"{17 * i + 3}+{29 * i + 5}="}], add_generation_prompt=True, tokenize=False
        )
        for i in range(n)
    ]
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    ids, mask, pos = (torch.stack(t) for t in zip(*(left_pad(r, width, tok.pad_token_id) for r in rows)))
    seeds = torch.arange(100, 100 + n, dtype=torch.long)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos, "sample_seeds": seeds},
        non_tensors={"uid": np.array([f"u{i}" for i in range(n)], dtype=object)},
        meta_info={"pad_token_id": tok.pad_token_id},
    )


def test_request_output_identical_alone_and_batched(quickstart):
    model, tok = quickstart
    engine = HFRollout(model, RolloutConfig(response_length=12, prompt_length=24), tok)
    params = SamplingParams(do_sample=True, temperature=1.0)
    prompts = [tok.encode(f"{a}+{b}=") for a, b in [(12, 34), (5, 7), (123, 456), (9, 90)]]
    reqs = [
        TokenRequest(p, params, max_new_tokens=m, seed=s) for p, m, s in zip(prompts, [12, 5, 9, 12], [7, 8, 9, 10])
    ]

    async def together():
        server = HFTokenServer(engine)
        outs = await asyncio.gather(*(server.generate(r) for r in reqs))
        return outs, server.num_passes

    async def alone(r):
        return await HFTokenServer(engine).generate(r)

    batched, passes = asyncio.run(together())
    assert passes == 1  # the four concurrent requests shared one prefill + decode pass
    for r, out in zip(reqs, batched):
        single = asyncio.run(alone(r))
        assert out.token_ids == single.token_ids
        assert out.log_probs == pytest.approx(single.log_probs, abs=1e-5)
        assert len(out.token_ids) <= r.max_new_tokens
        assert out.finish_reason in ("stop", "length")
    assert len(batched[1].token_ids) <= 5


def test_single_turn_agent_equals_generate_sequences(quickstart):
    model, tok = quickstart
    cfg = RolloutConfig(response_length=16, prompt_length=24, temperature=1.0)
    engine = HFRollout(model, cfg, tok)
    batch = _prompt_batch(tok)
    ref = engine.generate_sequences(batch)
    agent_cfg = RolloutConfig(response_length=16, prompt_length=24, temperature=1.0, mode="async")
    out = AgentLoopRollout(HFRollout(model, agent_cfg, tok), agent_cfg, tok).generate_sequences(batch)
    for key in ("prompts", "responses", "response_mask", "attention_mask", "position_ids", "input_ids"):
        assert torch.equal(out.batch[key], ref.batch[key]), key
    assert torch.allclose(out.batch["rollout_log_probs"], ref.batch["rollout_log_probs"], atol=1e-5)
    assert out.non_tensor_batch["num_turns"].tolist() == [1] * len(batch)
    assert ref.batch["response_mask"].sum() > 0


def test_single_turn_batches_keep_the_batched_path_and_dump(quickstart, tmp_path):
    import json

    from verl.trainer.ppo.dumps import dump_generations, generation_rows

    model, tok = quickstart
    cfg = RolloutConfig(response_length=8, prompt_length=24)
    batch = _prompt_batch(tok, n=2)
    out = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(batch)
    assert torch.equal(out.batch["responses"], HFRollout(model, cfg, tok).generate_sequences(batch).batch["responses"])
    assert agent_loop_metrics(out)["num_turns/mean"] == 1.0 and agent_loop_metrics(out)["tool_call_counts/max"] == 0.0
    out.batch["token_level_scores"] = torch.zeros(2, 8)
    rows = [json.loads(x) for x in dump_generations(tmp_path, 3, generation_rows(out, tok, 3)).read_text().splitlines()]
    assert [r["step"] for r in rows] == [3, 3] and rows[0]["input"].startswith("Q:3+5=")
    assert rows[1]["output"] == tok.decode(
        out.batch["responses"][1][out.batch["response_mask"][1].bool()], skip_special_tokens=True
    )


class _SlowEngine:
    """Answers with ``seed`` tokens; requests with a seed above ``hang_above`` never finish on
    their own (only cancellation ends them), so which ones are the slowest does not depend on load."""

    pad_token_id, eos_token_id = 0, [2]

    def __init__(self, hang_above: int | None = None) -> None:
        self.hang_above = hang_above

    async def generate(self, request: TokenRequest):
        from verl.workers.rollout.request import TokenOutput

        if self.hang_above is not None and request.seed > self.hang_above:
            await asyncio.Event().wait()
        return TokenOutput(token_ids=[5] * request.seed, log_probs=[-0.5] * request.seed, finish_reason="length")


def test_over_sample_rate_aborts_the_slowest():
    cfg = RolloutConfig(response_length=8, prompt_length=4, over_sample_rate=0.5)
    batch = DataProto.from_dict(
        tensors={
            "input_ids": torch.ones(4, 4, dtype=torch.long),
            "attention_mask": torch.ones(4, 4, dtype=torch.long),
            "position_ids": torch.arange(4).repeat(4, 1),
            "sample_seeds": torch.tensor([4, 1, 3, 2]),
        },
        meta_info={"pad_token_id": 0},
    )
    out = AgentLoopRollout(_SlowEngine(hang_above=2), cfg, tokenizer=None).generate_sequences(batch)
    assert out.batch["response_mask"].sum(-1).tolist() == [0, 1, 0, 2]  # seeds 4 and 3 were the slowest
    assert agent_loop_metrics(out)["multiturn/aborted"] == 2.0
    batch.meta_info["validate"] = True  # validation never aborts
    out = AgentLoopRollout(_SlowEngine(), cfg, tokenizer=None).generate_sequences(batch)
    assert out.batch["response_mask"].sum(-1).tolist() == [4, 1, 3, 2]
