"""Hermes tool-call parsing: several calls, caps, and every malformed input is an error string."""

from __future__ import annotations

import json

import pytest

from verl.tools import FunctionCall, parse_tool_calls, parse_tool_calls_ordered, render_tool_call, render_tool_response
from verl.tools.calculator import CalculatorTool
from verl.tools.gsm8k_tool import Gsm8kTool

TOOLS = {"calculator": CalculatorTool({}), "calc_gsm8k_reward": Gsm8kTool({})}


def block(name, arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_two_calls_and_content():
    text = (
        "Compute. "
        + block("calculator", {"expression": "2+3"})
        + " then "
        + block("calc_gsm8k_reward", {"answer": "5"})
    )
    content, calls, errors = parse_tool_calls(text, TOOLS, max_parallel_calls=2)
    assert content == "Compute.  then "
    assert calls == [
        FunctionCall("calculator", {"expression": "2+3"}),
        FunctionCall("calc_gsm8k_reward", {"answer": "5"}),
    ]
    assert errors == []


def test_no_calls_returns_text_unchanged():
    assert parse_tool_calls("#### 42", TOOLS, 1) == ("#### 42", [], [])


def test_cap_keeps_first_and_reports_the_rest():
    text = "".join(block("calculator", {"expression": f"{i}+1"}) for i in range(4))
    _, calls, errors = parse_tool_calls(text, TOOLS, max_parallel_calls=1)
    assert [c.arguments["expression"] for c in calls] == ["0+1"]
    assert errors == ["3 tool call(s) ignored: at most 1 per turn"]


@pytest.mark.parametrize(
    "body, needle",
    [
        ('{"name": "calculator", "arguments": {"expression": "1+1"', "not valid JSON"),
        ('["calculator"]', 'expected {"name"'),
        ('{"arguments": {}}', 'expected {"name"'),
        (
            '{"name": "weather", "arguments": {}}',
            "unknown tool 'weather'; available tools: calc_gsm8k_reward, calculator",
        ),
        (
            '{"name": "calculator", "arguments": {}}',
            "invalid arguments for tool 'calculator': 'expression' is a required property",
        ),
        ('{"name": "calculator", "arguments": {"expression": 7}}', "at 'expression': 7 is not of type 'string'"),
        ('{"name": "calculator", "arguments": [1]}', "arguments must be a JSON object"),
        ('{"name": "calculator", "arguments": "{oops"}', "arguments are not a JSON object"),
    ],
)
def test_malformed_calls_are_errors_not_exceptions(body, needle):
    content, calls, errors = parse_tool_calls(f"a<tool_call>{body}</tool_call>b", TOOLS, 4)
    assert content == "ab"
    assert calls == []
    assert len(errors) == 1 and needle in errors[0]


def test_string_encoded_arguments_are_accepted():
    body = json.dumps({"name": "calculator", "arguments": json.dumps({"expression": "6*7"})})
    _, calls, errors = parse_tool_calls(f"<tool_call>{body}</tool_call>", TOOLS, 1)
    assert calls == [FunctionCall("calculator", {"expression": "6*7"})] and errors == []


def test_unterminated_call_is_an_error_and_cut_from_content():
    text = "ok " + block("calculator", {"expression": "1"}) + ' more <tool_call>{"name": "calc'
    content, parsed = parse_tool_calls_ordered(text, TOOLS, 4)
    assert content == "ok  more "
    assert parsed[0].call == FunctionCall("calculator", {"expression": "1"})
    assert parsed[1].error == "malformed tool call: <tool_call> without </tool_call>"


def test_order_is_kept_in_ordered_form():
    text = "<tool_call>{bad}</tool_call>" + block("calculator", {"expression": "1"})
    _, parsed = parse_tool_calls_ordered(text, TOOLS, 2)
    assert parsed[0].error is not None and parsed[1].call is not None


def test_max_parallel_calls_must_be_positive():
    with pytest.raises(ValueError, match="max_parallel_calls"):
        parse_tool_calls("", TOOLS, 0)


def test_render_round_trips():
    call = FunctionCall("calculator", {"expression": "47*38"})
    assert (
        render_tool_call(call)
        == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "47*38"}}\n</tool_call>'
    )
    assert parse_tool_calls(render_tool_call(call), TOOLS, 1)[1] == [call]
    assert render_tool_response("1786") == "<tool_response>\n1786\n</tool_response>"


def test_calls_inside_reasoning_do_not_run():
    draft, real = block("calculator", {"expression": "1+1"}), block("calculator", {"expression": "2*3"})
    # a turn whose only call is a draft inside closed reasoning runs nothing
    text = f"<think>maybe {draft} first</think>No tool needed: 2."
    assert parse_tool_calls(text, TOOLS, 4) == (text, [], [])
    # only the call after the reasoning counts; the reasoning stays in the content
    content, calls, errors = parse_tool_calls(f"<think>draft {draft}</think>Now {real}", TOOLS, 4)
    assert calls == [FunctionCall("calculator", {"expression": "2*3"})] and errors == []
    assert content == f"<think>draft {draft}</think>Now "
    # several reasoning blocks, a malformed draft gives no error either
    text = f"<think>{draft}</think>{real}<think><tool_call>{{bad</tool_call></think>"
    assert parse_tool_calls(text, TOOLS, 4)[1:] == ([FunctionCall("calculator", {"expression": "2*3"})], [])


def test_unclosed_reasoning_runs_nothing_after_it():
    real = block("calculator", {"expression": "2*3"})
    content, calls, errors = parse_tool_calls(f"{real} <think>then {real} and", TOOLS, 4)
    assert len(calls) == 1 and errors == [] and content == f" <think>then {real} and"


def test_reasoning_opened_by_the_prompt():
    draft, real = block("calculator", {"expression": "1+1"}), block("calculator", {"expression": "2*3"})
    _, calls, _ = parse_tool_calls(f"draft {draft}</think>{real}", TOOLS, 4, in_reasoning=True)
    assert calls == [FunctionCall("calculator", {"expression": "2*3"})]
    assert parse_tool_calls(f"still thinking {draft}", TOOLS, 4, in_reasoning=True)[1] == []
    # without the flag, a stray </think> is plain text
    assert len(parse_tool_calls(f"{draft}</think>{real}", TOOLS, 4)[1]) == 2


def test_tags_inside_json_strings_are_data():
    args = {"expression": '1</tool_call><tool_call>{"name": "x"} <think> </think>'}
    text = "<tool_call>" + json.dumps({"name": "calculator", "arguments": args}) + "</tool_call>"
    # the calculator's schema only needs a string: the call comes back exactly
    _, calls, errors = parse_tool_calls(text + block("calc_gsm8k_reward", {"answer": "5"}), TOOLS, 4)
    assert (
        calls == [FunctionCall("calculator", args), FunctionCall("calc_gsm8k_reward", {"answer": "5"})] and errors == []
    )


def test_whitespace_anywhere_and_layout():
    body = json.dumps({"arguments": {"expression": "6*7"}, "name": "calculator"}, indent=2)
    text = f"<tool_call> \r\n\t{body}\n\n  </tool_call>\n<tool_call>{body}</tool_call>"
    assert parse_tool_calls(text, TOOLS, 4)[1:] == ([FunctionCall("calculator", {"expression": "6*7"})] * 2, [])


def test_a_broken_call_never_hides_the_next_one():
    good = block("calculator", {"expression": "2*3"})
    for broken in [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1</tool_call>',  # cut in a string
        '<tool_call>{"name": "calculator", "arguments": {}}',  # no end tag
        '<tool_call>{"name": "calculator", "arguments": {}} trailing</tool_call>',
        "<tool_call>{'name': 'calculator'}</tool_call>",
    ]:
        _, calls, errors = parse_tool_calls(broken + "\n" + good, TOOLS, 4)
        assert calls == [FunctionCall("calculator", {"expression": "2*3"})] and len(errors) == 1, broken
    # the reasoning after a broken call stays reasoning
    text = '<tool_call>{"name": "calculator", "arguments": {}}}</tool_call><think>' + good + "</think>"
    assert parse_tool_calls(text, TOOLS, 4)[1] == []


def test_deep_nesting_is_an_error_not_a_crash():
    _, calls, errors = parse_tool_calls("<tool_call>" + "[" * 100_000 + "</tool_call>", TOOLS, 4)
    assert calls == [] and len(errors) == 1


def test_malformed_json_message_reads_once():
    # json's message for a control character ends on "at": the error must not read "at at"
    _, calls, errors = parse_tool_calls('<tool_call>{"name": "a\x01"}</tool_call>', {})
    assert calls == [] and len(errors) == 1
    assert "at at" not in errors[0] and "Invalid control character at char" in errors[0]
