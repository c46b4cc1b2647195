"""Token-drift monitor and chat-template audit (`verl.workers.rollout.agent_loop.drift`, `.template_audit`).

A template that strips the ``<think>`` of earlier assistant turns drifts (rate > 0, at the first
reasoning token); the shipped Qwen2.5 template on the GSM8K tool task does not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.workers.rollout.agent_loop.agent_helpers import IM_END, qwen_tokenizer, thinking_tokenizer
from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.data.prepare import gsm8k_ground_truth, gsm8k_multiturn_row
from verl.protocol import DataProto
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.agent_loop.drift import drift_metrics, sample_rows
from verl.workers.rollout.agent_loop.template_audit import (
    audit_template,
    log_template_audit,
)
from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.trajectories import agent_loop_metrics

P, R = 512, 192


class TurnEngine:
    """Answers row ``i``'s turn ``t`` with ``encode(script(i, t)) + [<|im_end|>]`` (canonical ids)."""

    def __init__(self, tok, script) -> None:
        self.tok, self.script = tok, script
        self.pad_token_id, self.eos_token_id = tok.pad_token_id, [IM_END]

    async def generate(self, request: TokenRequest) -> TokenOutput:
        row, turn = (int(x) for x in request.request_id.split("-"))
        ids = (self.tok(self.script(row, turn), add_special_tokens=False)["input_ids"] + [IM_END])[
            : request.max_new_tokens
        ]
        return TokenOutput(
            token_ids=ids, log_probs=[-0.5] * len(ids), finish_reason="stop" if ids[-1] == IM_END else "length"
        )


def _batch(tok, rows: list[dict]) -> DataProto:
    n = len(rows)
    raw = np.empty(n, dtype=object)
    for i, r in enumerate(rows):
        raw[i] = r["prompt"]
    ids = torch.zeros(n, 4, dtype=torch.long)  # tool_agent renders its prompt from the messages
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(4).repeat(n, 1),
            "sample_seeds": torch.arange(n, dtype=torch.long) + 3,
        },
        non_tensors={
            "raw_prompt": raw,
            "extra_info": np.array([r["extra_info"] for r in rows], dtype=object),
            "agent_name": np.array(["tool_agent"] * n, dtype=object),
        },
        meta_info={"pad_token_id": tok.pad_token_id, "eos_token_id": [IM_END]},
    )


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="module")
def think_tok():
    return thinking_tokenizer(strip_earlier_reasoning=True)


def test_sampled_rows_are_evenly_spaced():
    assert (
        sample_rows(list(range(10)), 3) == [0, 4, 9] and sample_rows([1, 2], 8) == [1, 2] and sample_rows([1], 0) == []
    )


def test_a_template_that_strips_earlier_think_blocks_drifts_at_the_first_reasoning_token(tmp_path, think_tok):
    (tmp_path / "i.yaml").write_text(
        "interaction:\n  - name: retry\n"
        "    class_name: tests.workers.rollout.agent_loop.agent_helpers.RetryOnceInteraction\n    config: {}\n"
    )
    cfg = RolloutConfig(
        response_length=R,
        prompt_length=P,
        multi_turn=MultiTurnConfig(
            enable=True, interaction_config_path=str(tmp_path / "i.yaml"), tokenization_sanity_check_mode="disable"
        ),
    )
    tok = think_tok
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i}+{i}?"}],
            "extra_info": {"interaction_kwargs": {"name": "retry"}} if i % 2 else {},
        }
        for i in range(4)
    ]
    engine = TurnEngine(tok, lambda row, turn: "<think>\nadd them\n</think>\n\nIt is 4." if turn == 0 else "It is 4.")
    out = AgentLoopRollout(engine, cfg, tok).generate_sequences(_batch(tok, rows))
    ntb = out.non_tensor_batch
    # rows 1 and 3 got a user turn after the reasoning turn: the template re-renders that turn without <think>
    assert ntb["token_drift"].tolist() == [0, 1, 0, 1]
    prompt_len = int(out.batch["attention_mask"][1, :P].sum())  # the reasoning starts the response
    assert ntb["token_drift_offset"].tolist() == [-1, prompt_len, -1, prompt_len]
    think = tok("<think>", add_special_tokens=False)["input_ids"][0]
    assert int(out.batch["input_ids"][1, P]) == think  # the trained id at that offset (the first response token)
    metrics = agent_loop_metrics(out)
    assert metrics["multi_turn/drift_rate"] == 0.5 and metrics["multi_turn/drift_first_offset"] == prompt_len


def test_the_shipped_qwen25_template_on_the_gsm8k_tool_task_does_not_drift(shared_dir, tok):
    raws = [json.loads(line) for line in (shared_dir / "data/gsm8k/test.jsonl").read_text().splitlines()[:6]]
    rows = [gsm8k_multiturn_row(r, i, "test", "tool") for i, r in enumerate(raws)]
    truths = [gsm8k_ground_truth(r["answer"]) for r in raws]
    call = '<tool_call>\n{"name": "calc_gsm8k_reward", "arguments": {"answer": "%s"}}\n</tool_call>'

    def script(row, turn):
        return (
            f"Let me work it out step by step.\n{call % truths[row]}"
            if turn == 0
            else f"The tool says my answer is right.\n#### {truths[row]}"
        )

    cfg = RolloutConfig(
        response_length=R,
        prompt_length=P,
        multi_turn=MultiTurnConfig(enable=True, tool_config_path="builtin://gsm8k", max_assistant_turns=3),
    )
    out = AgentLoopRollout(TurnEngine(tok, script), cfg, tok).generate_sequences(_batch(tok, rows))
    assert [len(c) for c in out.non_tensor_batch["tool_calls"]] == [1] * 6  # every row called the tool
    assert out.non_tensor_batch["token_drift"].tolist() == [0] * 6  # 6 <= token_drift_samples: all checked
    metrics = agent_loop_metrics(out)
    assert metrics["multi_turn/drift_rate"] == 0.0 and metrics["multi_turn/drift_first_offset"] == -1.0


def test_drift_metrics_need_a_checked_row():
    assert (
        drift_metrics({}) == {}
        and drift_metrics({"token_drift": np.array([-1]), "token_drift_offset": np.array([-1])}) == {}
    )


def test_the_audit_reports_each_boundary_and_think_stripping(capsys, tok, think_tok):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Calculator.",
                "parameters": {
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
            },
        }
    ]
    plain = audit_template(tok, tools)
    assert "generation prompt: '<|im_start|>assistant\\n'" in plain
    assert any(
        line.startswith("no system prompt: the template writes '<|im_start|>system\\nYou are Qwen") for line in plain
    )
    assert (
        "assistant -> tool: appends '<|im_start|>user\\n<tool_response>\\n5\\n</tool_response><|im_end|>\\n'" in plain
    )
    assert "<think> of an earlier assistant turn: kept when later turns follow" in plain
    assert not any("NOT append-only" in line for line in plain)
    stripping = audit_template(think_tok, tools)
    assert any(line.startswith("assistant -> user: NOT append-only") for line in stripping)
    assert any("STRIPPED once a later user turn follows" in line for line in stripping)
    template = think_tok.chat_template
    think_tok.chat_template = template + " "  # a template no other test audits: audited once per process
    try:
        assert log_template_audit(think_tok, tools) and log_template_audit(think_tok, tools) == []
    finally:
        think_tok.chat_template = template
    assert capsys.readouterr().out.count("[chat template audit] generation prompt") == 1


@pytest.mark.parametrize("samples", [0, 2])
def test_samples_bound_the_checked_rows(samples, tok):
    cfg = RolloutConfig(
        response_length=64,
        prompt_length=P,
        multi_turn=MultiTurnConfig(
            enable=True, tool_config_path="builtin://gsm8k", token_drift_samples=samples, template_audit=False
        ),
    )
    rows = [{"prompt": [{"role": "user", "content": f"Q{i}"}], "extra_info": {}} for i in range(5)]
    out = AgentLoopRollout(TurnEngine(tok, lambda row, turn: "4"), cfg, tok).generate_sequences(_batch(tok, rows))
    flags = out.non_tensor_batch["token_drift"].tolist()
    assert flags == ([-1] * 5 if samples == 0 else [0, -1, -1, -1, 0])
