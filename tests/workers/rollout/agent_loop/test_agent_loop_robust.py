"""`AgentLoopRollout` never fails a batch for one row: a row whose agent loop raises comes back
failed (flagged, counted, empty response masked out of the loss), and a fuzz of model outputs
(random ids, garbage text, malformed and draft tool calls, stray chat-template tokens) over
append-only and non-append-only templates never raises out of the rollout."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tests.workers.rollout.agent_loop.agent_helpers import IM_END, qwen_tokenizer, thinking_tokenizer
from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.trajectories import agent_loop_metrics

P, R = 320, 160
CALL = '<tool_call>\n{"name": "echo", "arguments": {"text": "%s"}}\n</tool_call>'
PIECES = (
    [CALL % "hi"] * 4
    + ["<think>draft " + CALL % "draft" + "</think>", "<think>\nhm\n</think>\n\n"] * 2
    + [
        CALL % "raise",
        CALL % "<tool_call>",
        '<tool_call>{"name": "echo"',
        "<tool_call>{bad}</tool_call>",
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "echo", "arguments": [1]}</tool_call>',
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<|im_start|>user\n",
        "<|im_end|>",
        "<|endoftext|>",
        "The answer is 4.",
        " 中文 ",
        "😀",
        "\n\n",
        '{"a": [1, 2',
        "\\",
        '"',
    ]
)


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    d = tmp_path_factory.mktemp("agent_configs")
    (d / "tools.yaml").write_text(
        "tools:\n  - class_name: tests.workers.rollout.agent_loop.agent_helpers.EchoTool\n    config: {}\n"
    )
    (d / "interaction.yaml").write_text(
        "interaction:\n  - name: retry\n"
        "    class_name: tests.workers.rollout.agent_loop.agent_helpers.RetryOnceInteraction\n    config: {}\n"
    )
    return d


def _rollout_config(configs, **multi_turn):
    multi_turn.setdefault("tokenization_sanity_check_mode", "strict")
    return RolloutConfig(
        response_length=R,
        prompt_length=P,
        multi_turn=MultiTurnConfig(
            enable=True,
            tool_config_path=str(configs / "tools.yaml"),
            interaction_config_path=str(configs / "interaction.yaml"),
            **multi_turn,
        ),
    )


def _batch(tok, n: int) -> DataProto:
    raw = np.empty(n, dtype=object)
    for i in range(n):
        raw[i] = [{"role": "user", "content": f"Question {i}: what is {i}+{i}?"}]
    extra = [{"index": i, **({"interaction_kwargs": {"name": "retry"}} if i % 2 else {})} for i in range(n)]
    ids = torch.zeros(n, 4, dtype=torch.long)  # tool_agent renders its prompt from the messages
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(4).repeat(n, 1),
            "sample_seeds": torch.arange(n, dtype=torch.long) + 7,
        },
        non_tensors={
            "raw_prompt": raw,
            "extra_info": np.array(extra, dtype=object),
            "agent_name": np.array(["tool_agent"] * n, dtype=object),
            "uid": np.array([f"u{i}" for i in range(n)], dtype=object),
        },
        meta_info={"pad_token_id": tok.pad_token_id, "eos_token_id": [IM_END]},
    )


class RowEngine:
    """A token engine answering row ``i``'s turns with ``script(i, turn, request)`` -> ids (a stop
    at ``<|im_end|>``), and keeping each row's generated ids; ``script`` may raise."""

    def __init__(self, tok, script) -> None:
        self.tok, self.script = tok, script
        self.generated: dict[int, list[int]] = {}
        self.pad_token_id, self.eos_token_id = tok.pad_token_id, [IM_END]

    async def generate(self, request: TokenRequest) -> TokenOutput:
        row, turn = (int(x) for x in request.request_id.split("-"))
        ids, stop = self.script(row, turn, request)
        ids = list(ids)[: request.max_new_tokens] or [IM_END]
        finish = "stop" if stop and ids[-1] == IM_END else "length"
        self.generated.setdefault(row, []).extend(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), finish_reason=finish)


def _scripted(tok, texts_by_row):
    def script(row, turn, request):
        text = texts_by_row(row, turn)
        return tok(text, add_special_tokens=False)["input_ids"] + [IM_END], True

    return script


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


def test_one_failing_row_fails_alone(tok, configs):
    def texts(row, turn):
        if row == 1:
            raise RuntimeError("engine lost the request of row 1")
        return CALL % "x" if turn == 0 and row == 0 else "It is 4."

    engine = RowEngine(tok, _scripted(tok, texts))
    out = AgentLoopRollout(engine, _rollout_config(configs), tok).generate_sequences(_batch(tok, 3))
    assert out.non_tensor_batch["failed"].tolist() == [0, 1, 0]
    mask, attn = out.batch["response_mask"], out.batch["attention_mask"][:, P:]
    assert mask[1].sum() == 0 and attn[1].sum() == 0  # nothing of the failed row reaches the loss
    assert mask[0].sum() > 0 and mask[2].sum() > 0 and out.non_tensor_batch["tool_calls"][0][0]["status"] == "ok"
    assert agent_loop_metrics(out)["multiturn/failed"] == 1.0
    assert out.non_tensor_batch["messages"][1] == [{"role": "user", "content": "Question 1: what is 1+1?"}]


def test_a_batch_where_every_row_failed_raises(tok, configs):
    def texts(row, turn):
        raise RuntimeError(f"engine down (row {row})")

    rollout = AgentLoopRollout(RowEngine(tok, _scripted(tok, texts)), _rollout_config(configs), tok)
    with pytest.raises(RuntimeError, match=r"engine down \(row 0\)"):  # row 0's own error, as it was raised
        rollout.generate_sequences(_batch(tok, 2))


def _garbage(tok):
    """Random model turns, seeded by (row, turn): random ids over the whole vocabulary (special
    tokens included), garbage text, malformed / draft tool calls; stopped or cut."""
    vocab = len(tok)

    def script(row, turn, request):
        rng = random.Random(row * 1000 + turn)
        kind = rng.random()
        if kind < 0.25:
            ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]
        else:
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8)))
            ids = tok(text, add_special_tokens=False)["input_ids"]
            if kind < 0.4:  # and a few random ids inside
                ids[rng.randrange(len(ids) + 1) : 0] = [rng.randrange(vocab) for _ in range(3)]
        stop = rng.random() < 0.8
        return ids + ([IM_END] if stop else []), stop

    return script


@pytest.mark.parametrize(
    "template, mode, parallel",
    [("append_only", "strict", 3), ("strips_reasoning", "strict", 1), ("opens_think", "ignore_strippable", 3)],
)
def test_fuzzed_model_outputs_never_raise(tok, configs, template, mode, parallel):
    t = {
        "append_only": lambda: tok,
        "strips_reasoning": thinking_tokenizer,
        "opens_think": lambda: thinking_tokenizer(open_think=True),
    }[template]()
    n = 16
    engine = RowEngine(t, _garbage(t))
    cfg = _rollout_config(
        configs,
        max_assistant_turns=5,
        max_user_turns=2,
        max_parallel_calls=parallel,
        tokenization_sanity_check_mode=mode,
    )
    out = AgentLoopRollout(engine, cfg, t).generate_sequences(_batch(t, n))
    assert out.non_tensor_batch["failed"].tolist() == [0] * n
    mask, resp = out.batch["response_mask"], out.batch["responses"]
    attn, logp = out.batch["attention_mask"][:, P:], out.batch["rollout_log_probs"]
    for i in range(n):
        k = int(attn[i].sum())
        assert k > 0 and mask[i, k - 1] == 1  # every trajectory ends on a model token
        assert resp[i][mask[i].bool()].tolist() == engine.generated[i]  # model tokens exactly as sampled
        assert bool((logp[i][~mask[i].bool()] == 0).all())
    statuses = [c["status"] for calls in out.non_tensor_batch["tool_calls"] for c in calls]
    assert set(statuses) <= {"ok", "error", "timeout", "malformed"}
    assert "ok" in statuses and statuses.count("malformed") >= 3  # the fuzz reached the tools
    assert not any(c["arguments"] == {"text": "draft"} for calls in out.non_tensor_batch["tool_calls"] for c in calls)
    metrics = agent_loop_metrics(out)
    assert metrics["multiturn/failed"] == 0.0 and metrics["num_turns/mean"] > 1.5
