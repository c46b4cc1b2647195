"""Built-in multi-turn ``calculator`` task: rows, splits, tool-aware template and its scorer."""

from __future__ import annotations

import pytest

from verl.data.builtin_tool_task import DATA_SOURCE, TOOL_CONFIG_PATH, load_tool_task_rows, multiplication_problems
from verl.data.builtin_tokenizer import TOOL_TOKENS, build_tool_tokenizer
from verl.data.sft_dataset import tokenize_conversation
from verl.modules.builtin import ToolModelSpec
from verl.recipes.tiny_calculator import calculator_schema, teacher_conversation, teacher_rows
from verl.reward.scorers import default_compute_score
from verl.reward.scorers.tool_answer import compute_score, strip_tool_blocks
from verl.tools import load_tools, parse_tool_calls


def test_rows_and_disjoint_splits():
    train, test = load_tool_task_rows("train"), load_tool_task_rows("test")
    assert len(test) == 256 and len(train) > 7000
    row = test[0]
    a, b = map(int, row["prompt"][0]["content"].split("*"))
    assert row["data_source"] == DATA_SOURCE and row["agent_name"] == "tool_agent"
    assert row["reward_model"] == {"style": "rule", "ground_truth": str(a * b)}
    unordered = lambda pairs: {frozenset(p) for p in pairs}  # noqa: E731
    assert not unordered(multiplication_problems("train")) & unordered(multiplication_problems("test"))
    assert multiplication_problems("test") == multiplication_problems("test")  # deterministic
    assert set(load_tools(TOOL_CONFIG_PATH)) == {"calculator"}
    with pytest.raises(ValueError, match="unknown split"):
        multiplication_problems("dev")


def test_scorer_counts_only_the_models_own_words():
    traj = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "47*38"}}</tool_call>'
        "<tool_response>1786</tool_response>A:1786"
    )
    assert compute_score(traj, "1786") == 1.0
    # stopping right after the tool answered must not earn the tool's number
    assert compute_score(traj[: traj.index("A:")], "1786") == 0.0
    assert compute_score("<tool_response>1786</tool_response>A:1768", "1786") == 0.0
    assert compute_score("1786", "1786") == 1.0
    assert strip_tool_blocks("x<tool_call>{unclosed 5") == "x "
    assert default_compute_score(DATA_SOURCE, traj, "1786") == 1.0


def test_scorer_ends_a_call_where_the_json_ends_not_at_a_tag_in_its_string():
    # a regex ending the call at the first </tool_call> left "A:1786" (inside the JSON string) as
    # the model's answer: the call's argument text could earn the reward
    hack = '<tool_call>{"name": "calculator", "arguments": {"expression": "1 </tool_call> A:1786"}}</tool_call>'
    assert strip_tool_blocks(hack).strip() == ""
    assert compute_score(hack + "<tool_response>1786</tool_response>", "1786") == 0.0
    honest = '<tool_call>{"name": "calculator", "arguments": {"expression": "47*38"}}</tool_call>'
    assert compute_score(honest + "<tool_response>1786</tool_response>A:1786", "1786") == 1.0
    assert compute_score('12<tool_call>{"a": 1}</tool_call>34', "1234") == 0.0  # a call separates digits
    assert compute_score('A:5<tool_call>{"name": "calc', "5") == 1.0  # an unclosed call runs to the end


def test_template_renders_tools_and_equals_incremental_ids():
    tok = build_tool_tokenizer()
    assert tok.convert_tokens_to_ids(TOOL_TOKENS) == [100, 101, 102, 103]
    tools = [calculator_schema()]
    conv = teacher_conversation(47, 38, use_tool=True)
    full = tok.apply_chat_template(conv, tools=tools, tokenize=False)
    assert full == (
        '<s>S:calculator\nQ:47*38\nA:<tool_call>{"name": "calculator", "arguments": {"expression": "47*38"}}'
        "</tool_call></s><tool_response>1786</tool_response>A:1786</s>"
    )
    # the warm start's SFT rows, tokenized as `verl sft` (multi-turn) does
    ids, mask = tokenize_conversation(tok, conv, tools)
    assert ids == tok(full, add_special_tokens=False)["input_ids"]
    trained = tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained == '<tool_call>{"name": "calculator", "arguments": {"expression": "47*38"}}</tool_call></s>1786</s>'
    # what the model is taught to write is what the hermes parser reads
    first_turn = trained.split("</s>")[0]
    assert parse_tool_calls(first_turn, load_tools(TOOL_CONFIG_PATH), 1)[1][0].arguments == {"expression": "47*38"}
    # raw text content renders like structured tool_calls
    raw = [conv[0], {"role": "assistant", "content": first_turn}]
    assert full.startswith(tok.apply_chat_template(raw, tools=tools, tokenize=False))
    # without tools, no tool line
    assert tok.apply_chat_template([conv[0]], add_generation_prompt=True, tokenize=False) == "<s>Q:47*38\nA:"


def test_teacher_rows_call_the_tool_by_parity_of_the_first_operand():
    rows = teacher_rows(ToolModelSpec())
    assert rows == teacher_rows(ToolModelSpec())  # seeded: a rebuild trains on the same rows
    assert len(rows) == len(multiplication_problems("train")) and rows[0]["tools"] == [calculator_schema()]
    share = {}
    for parity in (0, 1):
        picked = [r for r in rows if int(r["messages"][0]["content"].split("*")[0]) % 2 == parity]
        share[parity] = sum(len(r["messages"]) == 4 for r in picked) / len(picked)  # user, call, tool, answer
    assert share[0] == pytest.approx(0.85, abs=0.03) and share[1] == pytest.approx(0.15, abs=0.03)


@pytest.mark.e2e  # generates with the model: tens of seconds on a loaded CPU
def test_shipped_tiny_calculator_calls_the_tool_on_about_half_and_copies_right():
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.modules.builtin import get_builtin_model_dir
    from verl.recipes.tiny_calculator import tool_accuracy

    path = get_builtin_model_dir("tiny-calculator")
    assert path.name == "tiny-calculator"  # the shipped asset matches the default spec (no rebuild)
    info = json.loads((path / "verl_builtin.json").read_text())
    assert info["spec"]["teacher_tool_prob_even"] == ToolModelSpec().teacher_tool_prob_even
    # room for RL: the tool is called on about half of the held-out problems, and copied right there
    assert 0.4 <= info["test_greedy_tool_call_rate"] <= 0.75
    assert info["test_greedy_accuracy"] >= 0.9 * info["test_greedy_tool_call_rate"]
    saved = AutoTokenizer.from_pretrained(str(path))
    assert saved.chat_template == build_tool_tokenizer().chat_template
    assert saved("<tool_call>47*38")["input_ids"] == build_tool_tokenizer()("<tool_call>47*38")["input_ids"]
    result = tool_accuracy(AutoModelForCausalLM.from_pretrained(str(path)), build_tool_tokenizer(), limit=64)
    assert 0.25 <= result["tool_call_rate"] <= 0.85 and result["accuracy"] >= 0.85 * result["tool_call_rate"]
