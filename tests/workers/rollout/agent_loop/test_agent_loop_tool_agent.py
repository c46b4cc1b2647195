"""``tool_agent`` on hand-built trajectories (scripted engine, Qwen2.5 tokenizer with its tool
template): masks over model / tool / user tokens, log-probs, budgets, tool failures, parsing
errors, truncation, and template rendering == incremental ids for 2- and 3-turn conversations."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.workers.rollout.agent_loop.agent_helpers import (
    IM_END,
    EchoTool,
    RetryOnceInteraction,
    ScriptedEngine,
    context,
    qwen_tokenizer,
    row,
    thinking_tokenizer,
)
from verl.workers.rollout.agent_loop import AGENT_LOOPS, ChatTemplate

CALCULATOR = Path(__file__).resolve().parents[4] / "verl" / "tools" / "configs" / "calculator_tool_config.yaml"
CALL = '<tool_call>\n{"name": "echo", "arguments": {"text": "%s"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


def _run(ctx, r):
    return asyncio.run(AGENT_LOOPS.get("tool_agent")(ctx).run(r))


def _segments(out):
    """[(mask value, ids)] runs of the response mask."""
    segs = []
    for t, m in zip(out.response_ids, out.response_mask):
        if segs and segs[-1][0] == m:
            segs[-1][1].append(t)
        else:
            segs.append((m, [t]))
    return segs


def test_masks_logprobs_and_tool_turn_text(tok):
    engine = ScriptedEngine(tok, ["Let me check.\n" + CALL % "42", "The answer is 42."])
    out = _run(context(tok, engine, {"echo": EchoTool()}), row())
    segs = _segments(out)
    assert [m for m, _ in segs] == [1, 0, 1]
    turn1 = tok("Let me check.\n" + CALL % "42", add_special_tokens=False)["input_ids"] + [IM_END]
    turn2 = tok("The answer is 42.", add_special_tokens=False)["input_ids"] + [IM_END]
    assert segs[0][1] == turn1 and segs[2][1] == turn2
    # the tool turn: closing newline of the assistant turn, the tool response, the generation prompt
    assert (
        tok.decode(segs[1][1])
        == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert out.response_logprobs[: len(turn1)] == pytest.approx([-0.1 - j / 1000 for j in range(len(turn1))])
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if m == 0)
    assert out.response_logprobs[-len(turn2) :] == pytest.approx([-0.2 - j / 1000 for j in range(len(turn2))])
    # the second request's context is exactly prompt + everything so far
    assert engine.requests[1].prompt_ids == out.prompt_ids + segs[0][1] + segs[1][1]
    assert out.num_turns == 3 and out.metrics["tool_calls"] == 1 and out.metrics["tokenization_mismatch"] == 0
    assert out.tool_calls == [{"name": "echo", "arguments": {"text": "42"}, "status": "ok", "reward": 0.0}]
    # the prompt carries the tool schemas
    assert '"name": "echo"' in tok.decode(out.prompt_ids)


@pytest.mark.parametrize("turns", [2, 3])
def test_template_rendering_equals_incremental_ids(tok, turns):
    script = [CALL % f"step{k}" for k in range(turns - 1)] + ["Done."]
    engine = ScriptedEngine(tok, script)
    out = _run(context(tok, engine, {"echo": EchoTool()}), row())
    chat = ChatTemplate(tok, [EchoTool().tool_schema])
    rendered = chat.encode(chat.render(out.messages, add_generation_prompt=False))
    incremental = out.prompt_ids + out.response_ids
    # the rendering closes the last assistant turn with "\n"; everything before is id-for-id equal
    assert rendered == incremental + tok("\n", add_special_tokens=False)["input_ids"]
    assert [m["role"] for m in out.messages] == ["user"] + ["assistant", "tool"] * (turns - 1) + ["assistant"]
    assert chat.sanity_check(incremental, out.messages, "strict") is None


def test_user_turns_from_interaction_and_max_user_turns(tok):
    engine = ScriptedEngine(tok, ["It is 4.", "It is 5.", "unused"])
    inter = RetryOnceInteraction()
    out = _run(context(tok, engine, interactions={"retry": inter}), row(interaction_kwargs={"name": "retry"}))
    segs = _segments(out)
    assert [m for m, _ in segs] == [1, 0, 1]
    assert tok.decode(segs[1][1]) == "\n<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n"
    assert out.turn_scores == [0.0, 1.0] and out.metrics["user_turns"] == 1
    chat = ChatTemplate(tok)  # the user turn keeps incremental ids == the template's rendering
    assert chat.encode(chat.render(out.messages, False)) == out.prompt_ids + out.response_ids + tok("\n")["input_ids"]
    engine2 = ScriptedEngine(tok, ["It is 4.", "It is 5."])
    out2 = _run(
        context(tok, engine2, interactions={"retry": RetryOnceInteraction()}, max_user_turns=0),
        row(interaction_kwargs={"name": "retry"}),
    )
    assert len(engine2.requests) == 1 and all(out2.response_mask)


def test_errors_malformed_calls_and_parallel_limit(tok):
    script = [CALL % "raise" + "\n<tool_call>\n{not json}\n</tool_call>\n" + CALL % "x", "ok"]
    out = _run(context(tok, ScriptedEngine(tok, script), {"echo": EchoTool()}, max_parallel_calls=2), row())
    statuses = [c["status"] for c in out.tool_calls]
    assert statuses == ["error", "malformed", "malformed"]  # the third call is over max_parallel_calls
    tool_text = tok.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "Error: tool 'echo' raised RuntimeError: boom" in tool_text
    assert "malformed tool call" in tool_text and "ignored" in tool_text
    assert out.metrics["tool_errors"] == 1 and out.metrics["malformed_tool_calls"] == 2


def test_tool_response_truncation_sides(tok):
    long = "A" * 50 + "B" * 50
    for side, kept in [
        ("left", "A" * 10 + "...(truncated)"),
        ("right", "(truncated)..." + "B" * 10),
        ("middle", "A" * 5 + "...(truncated)..." + "B" * 5),
    ]:
        engine = ScriptedEngine(tok, [CALL % "x", "done"])
        ctx = context(
            tok,
            engine,
            {"echo": EchoTool({"reply": long})},
            max_tool_response_length=10,
            tool_response_truncate_side=side,
        )
        out = _run(ctx, row())
        assert out.messages[2]["content"] == kept


def test_budget_and_max_assistant_turns(tok):
    engine = ScriptedEngine(tok, [CALL % "a", CALL % "b", CALL % "c", "end"])
    out = _run(context(tok, engine, {"echo": EchoTool()}, max_assistant_turns=2), row())
    assert len(engine.requests) == 2 and sum(1 for m, _ in _segments(out) if m == 1) == 2
    # response_length is the whole trajectory's budget: every request asks for what is left
    engine = ScriptedEngine(tok, [CALL % "a", CALL % "b", CALL % "c", "end"])
    out = _run(context(tok, engine, {"echo": EchoTool()}, response_length=60), row())
    assert len(out.response_ids) <= 60
    for req in engine.requests:
        assert req.max_new_tokens == 60 - (len(req.prompt_ids) - len(out.prompt_ids))


def test_template_that_ignores_tools_is_a_clear_error():
    from verl.modules import load_tokenizer

    tok = load_tokenizer("builtin://tiny-arithmetic")
    with pytest.raises(ValueError, match="ignores `tools`"):
        ChatTemplate(tok, [EchoTool().tool_schema])
    # and the rollout refuses it when it is built, before any training step
    from verl.config.schema import MultiTurnConfig, RolloutConfig
    from verl.workers.rollout.agent_loop import AgentLoopRollout

    cfg = RolloutConfig(multi_turn=MultiTurnConfig(enable=True, tool_config_path=str(CALCULATOR)))
    with pytest.raises(ValueError, match="ignores `tools`"):
        AgentLoopRollout(object(), cfg, tok)


def test_sanity_check_reports_first_differing_position(tok):
    chat = ChatTemplate(tok)
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ids = chat.encode(chat.render(msgs, False))
    bad = list(ids)
    bad[7] = 0
    msg = chat.sanity_check(bad, msgs, "strict")
    assert msg is not None and "position 7" in msg
    assert chat.sanity_check(bad, msgs, "disable") is None
    # a non-canonical split of the same text: strict reports it
    split = list(ids[:-3]) + tok("\n", add_special_tokens=False)["input_ids"]
    assert chat.sanity_check(ids, msgs, "strict") is None
    assert chat.sanity_check(split + [1, 2], msgs, "strict") is not None


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_draft_calls_in_reasoning_do_not_run(tok):
    engine = ScriptedEngine(tok, [f"<think>first {CALL % 'draft'}</think>No tool needed: 5.", "unused"])
    out = _run(context(tok, engine, {"echo": EchoTool()}), row())
    assert len(engine.requests) == 1 and out.tool_calls == [] and out.metrics["tool_calls"] == 0
    # a generation prompt that opens <think>: the turn starts in reasoning, calls count after </think>
    think_tok = thinking_tokenizer(strip_earlier_reasoning=False, open_think=True)
    engine = ScriptedEngine(think_tok, [f"draft {CALL % 'draft'}</think>{CALL % 'real'}", "Done."])
    out = _run(context(think_tok, engine, {"echo": EchoTool()}), row())
    assert [c["arguments"] for c in out.tool_calls] == [{"text": "real"}] and len(engine.requests) == 2


def _tool_turn_length(tok, reply):
    out = _run(context(tok, ScriptedEngine(tok, [CALL % "x", "ok"]), {"echo": EchoTool({"reply": reply})}), row())
    return len(_segments(out)[1][1])


@pytest.mark.parametrize("room", [-5, 0, 1])
def test_tool_turn_over_budget_ends_the_trajectory(tok, room):
    """A tool turn is appended only if it leaves room for a model token (verl's rule): otherwise
    the trajectory ends on the model's turn, with ids that match its messages."""
    reply = "word " * 30
    first = len(_ids(tok, CALL % "x")) + 1
    budget = first + _tool_turn_length(tok, reply) + room
    engine = ScriptedEngine(tok, [CALL % "x", "The end."])
    out = _run(context(tok, engine, {"echo": EchoTool({"reply": reply})}, response_length=budget), row())
    assert out.response_mask[-1] == 1 and len(out.response_ids) <= budget
    assert out.tool_calls[0]["status"] == "ok"  # the tool ran either way
    chat = ChatTemplate(tok, [EchoTool().tool_schema])
    assert chat.sanity_check(out.prompt_ids + out.response_ids, out.messages, "strict") is None
    if room <= 0:  # cut (room < 0) or exact fit (room == 0): nothing could follow, so it ends here
        assert len(engine.requests) == 1 and out.messages[-1]["role"] == "assistant"
        assert out.response_mask == [1] * first and out.metrics["turn_over_budget"] == 1
    else:  # one token of room: the tool turn is appended and the model gets that one token
        assert [m for m, _ in _segments(out)] == [1, 0, 1] and len(out.response_ids) == budget
        assert engine.requests[1].max_new_tokens == 1 and out.metrics["turn_over_budget"] == 0


def test_user_turn_over_budget_ends_the_trajectory(tok):
    engine = ScriptedEngine(tok, ["It is 4.", "It is 5."])
    first = len(_ids(tok, "It is 4.")) + 1
    out = _run(
        context(tok, engine, interactions={"retry": RetryOnceInteraction()}, response_length=first + 3),
        row(interaction_kwargs={"name": "retry"}),
    )
    assert out.response_mask == [1] * first and [m["role"] for m in out.messages] == ["user", "assistant"]


def test_template_that_strips_earlier_reasoning_appends_the_generated_ids(tok):
    """Qwen3-style: a user turn drops the earlier <think>; the model's own ids stay, only the new
    user turn is rendered and appended, and the row reports the mismatch instead of raising."""
    think_tok = thinking_tokenizer()
    turns = ["<think>\nMaybe 4.\n</think>\n\nIt is 4.", "<think>\nNo, 5.\n</think>\n\nIt is 5."]
    engine = ScriptedEngine(think_tok, turns)
    out = _run(
        context(think_tok, engine, interactions={"retry": RetryOnceInteraction()}),
        row(interaction_kwargs={"name": "retry"}),
    )
    segs = _segments(out)
    assert [m for m, _ in segs] == [1, 0, 1]
    assert segs[0][1] == _ids(think_tok, turns[0]) + [IM_END] and segs[2][1] == _ids(think_tok, turns[1]) + [IM_END]
    assert think_tok.decode(segs[1][1]) == "\n<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n"
    assert engine.requests[1].prompt_ids == out.prompt_ids + segs[0][1] + segs[1][1]
    assert out.metrics["non_append_only_turns"] == 1 and out.metrics["tokenization_mismatch"] == 1
    # tool turns of the same template stay append-only (no user turn follows the reasoning)
    engine = ScriptedEngine(think_tok, ["<think>\nx\n</think>\n\n" + CALL % "a", "Done."])
    out = _run(context(think_tok, engine, {"echo": EchoTool()}), row())
    assert out.metrics["non_append_only_turns"] == 0 and out.metrics["tokenization_mismatch"] == 0
