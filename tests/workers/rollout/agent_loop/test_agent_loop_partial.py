"""Partial rollouts through the agent loops: a weight update while a tool call is pending (the
built-in ``tiny-calculator`` on the ``hf`` engine, greedy). The call finishes, the next assistant
turn samples under the new version, and the trajectory's masks stay right."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.data.builtin_tokenizer import build_tool_tokenizer
from verl.data.builtin_tool_task import TOOL_CONFIG_PATH, load_tool_task_rows
from verl.modules.builtin import get_builtin_model_dir
from verl.protocol import DataProto
from verl.tools.calculator import CalculatorTool
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.hf.hf_server import HFTokenServer
from verl.workers.rollout.partial import NOT_SAMPLED
from verl.workers.rollout.request import TokenRequest
from verl.workers.rollout.sampling import SamplingParams

RESPONSE = 160


class UpdatingCalculator(CalculatorTool):
    """The calculator; its first call waits for ``update`` (run in a thread, as a trainer would)."""

    update: Any = None
    expressions: list[str] = []

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[Any, float, dict]:
        if self.update is not None and not self.expressions:
            self.expressions.append(str(parameters.get("expression")))
            await asyncio.to_thread(self.update)
        return await super().execute(instance_id, parameters, **kwargs)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tool_tokenizer()


def _model() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(get_builtin_model_dir("tiny-calculator"), dtype=torch.float32).eval()


def _rollout(model: torch.nn.Module, tokenizer: Any, update: Any = None) -> tuple[AgentLoopRollout, UpdatingCalculator]:
    cfg = RolloutConfig(
        response_length=RESPONSE,
        prompt_length=128,
        do_sample=False,
        mode="async",
        multi_turn=MultiTurnConfig(enable=True, tool_config_path=str(TOOL_CONFIG_PATH)),
    )
    rollout = AgentLoopRollout(HFRollout(model, cfg, tokenizer), cfg, tokenizer)
    tool = UpdatingCalculator()
    tool.update, tool.expressions = update, []
    rollout.tools["calculator"] = tool
    return rollout, tool


def _batch(tokenizer: Any, n: int = 4) -> DataProto:
    rows = load_tool_task_rows("test")[:n]
    ids = [tokenizer(r["prompt"][0]["content"], add_special_tokens=False)["input_ids"] for r in rows]
    width = max(len(i) for i in ids)
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    raw = np.empty(n, dtype=object)
    for k, r in enumerate(rows):
        raw[k] = r["prompt"]
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask},
        non_tensors={"raw_prompt": raw, "agent_name": np.array(["tool_agent"] * n, dtype=object)},
    )


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in ``mask``."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def _caller_row(out: DataProto, expression: str) -> int:
    calls = out.non_tensor_batch["tool_calls"]
    rows = [i for i in range(len(out)) if calls[i] and calls[i][0]["arguments"] == {"expression": expression}]
    assert rows, "the trajectory whose call spanned the update is in the batch"
    return rows[0]


def test_tool_call_spanning_a_version_bump_keeps_tokens_and_masks(tokenizer) -> None:
    ref_rollout, _ = _rollout(_model(), tokenizer)
    ref = ref_rollout.generate_sequences(_batch(tokenizer))
    rollout, tool = _rollout(_model(), tokenizer)
    engine = rollout.engine

    def bump() -> None:  # same weights, new version: caches are rebuilt, the tokens must not change
        with engine.paused(timeout=60):
            engine.update_weights(engine.module.state_dict(), version=1)

    tool.update = bump
    out = rollout.generate_sequences(_batch(tokenizer))
    assert tool.expressions, "the warm-started model called the calculator"
    for key in ("responses", "response_mask", "attention_mask"):
        assert torch.equal(out.batch[key], ref.batch[key]), key
    torch.testing.assert_close(out.batch["rollout_log_probs"], ref.batch["rollout_log_probs"], atol=1e-5, rtol=0)
    versions, mask = out.batch["rollout_policy_versions"], out.batch["response_mask"]
    assert torch.equal(versions >= 0, mask.bool())  # tool tokens and padding: no policy sampled them
    row = _caller_row(out, tool.expressions[0])
    runs = _runs(mask[row].tolist())
    assert [v for v, _, _ in runs[:3]] == [1, 0, 1]  # assistant turn, tool turn, assistant turn
    (_, a0, a1), (_, t0, t1), (_, b0, b1) = runs[:3]
    assert (versions[row, a0:a1] == 0).all() and (versions[row, t0:t1] == NOT_SAMPLED).all()
    assert (versions[row, b0:b1] == 1).all()  # the turn after the pending call: the new version
    assert "<tool_response>" in tokenizer.decode(out.batch["responses"][row, t0:t1].tolist())
    assert int(out.non_tensor_batch["min_global_steps"][row]) == 0
    assert int(out.non_tensor_batch["max_global_steps"][row]) == 1


def test_turn_after_the_pending_call_is_sampled_by_the_new_weights(tokenizer) -> None:
    new = _model()
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    rollout, tool = _rollout(_model(), tokenizer)
    engine = rollout.engine

    def load() -> None:
        with engine.paused(timeout=60):
            engine.update_weights(new.state_dict(), version=1)

    tool.update = load
    out = rollout.generate_sequences(_batch(tokenizer))
    row = _caller_row(out, tool.expressions[0])
    mask, resp = out.batch["response_mask"][row].tolist(), out.batch["responses"][row]
    (_, _, _), (_, _, t1), (_, b0, b1) = _runs(mask)[:3]
    prompt = out.batch["prompts"][row][
        out.batch["attention_mask"][row, : out.batch["prompts"].shape[1]].bool()
    ].tolist()
    fresh = HFTokenServer(HFRollout(new, rollout.config, tokenizer)).generate_batch(
        [
            TokenRequest(
                prompt_ids=prompt + resp[:t1].tolist(),
                sampling=SamplingParams(do_sample=False),
                max_new_tokens=RESPONSE - t1,
            )
        ]
    )[0]
    assert resp[b0:b1].tolist() == fresh.token_ids[: b1 - b0]
    logp = out.batch["rollout_log_probs"][row, b0:b1]
    torch.testing.assert_close(logp, torch.tensor(fresh.log_probs[: b1 - b0]), atol=1e-4, rtol=0)
    ids = torch.tensor([prompt + resp[:b1].tolist()])
    with torch.no_grad():  # the old weights give these tokens other log-probs: the update took effect
        old = torch.log_softmax(_model()(input_ids=ids).logits[0, len(prompt) + b0 - 1 : len(prompt) + b1 - 1], -1)
    old_logp = old.gather(-1, resp[b0:b1].unsqueeze(-1)).squeeze(-1)
    assert (old_logp - logp).abs().max() > 1e-3
    assert (out.batch["rollout_policy_versions"][row, b0:b1] == 1).all()
    assert torch.equal(out.batch["rollout_policy_versions"] >= 0, out.batch["response_mask"].bool())
