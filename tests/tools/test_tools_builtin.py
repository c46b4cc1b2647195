"""Built-in Gsm8kTool (verl's behaviour), calculator and Gsm8kInteraction."""

from __future__ import annotations

import asyncio

import pytest

from verl.interactions.gsm8k_interaction import CORRECT_MESSAGE, RETRY_MESSAGE, Gsm8kInteraction
from verl.tools import FunctionCall, ToolError, ToolSession
from verl.tools.calculator import CalculatorTool, evaluate_expression, format_number
from verl.tools.gsm8k_tool import Gsm8kTool


def run(coro):
    return asyncio.run(coro)


def test_gsm8k_tool_feedback_and_penalty():
    async def go():
        tool = Gsm8kTool({})
        iid, _ = await tool.create(create_kwargs={"ground_truth": "72"})
        out = [await tool.execute(iid, {"answer": a}) for a in ("70", "72", "#### 72", "71")]
        final = await tool.calc_reward(iid)
        await tool.release(iid)
        return out, final, tool._instances

    out, final, left = run(go())
    texts = [r[0].text for r in out]
    assert texts == [
        "Current parsed answer='70' reward=0.0",
        "Current parsed answer='72' reward=1.0",
        "Current parsed answer='#### 72' reward=1.0",
        "Current parsed answer='71' reward=0.0",
    ]
    # 0.0 when the score rises, -0.05 otherwise (verl's non-improving penalty)
    assert [r[1] for r in out] == [-0.05, 0.0, -0.05, -0.05]
    assert final == 0.0 and left == {}


def test_gsm8k_tool_ground_truth_keyword_and_numeric_answer():
    async def go():
        tool = Gsm8kTool({})
        iid, _ = await tool.create("a", ground_truth="1000")
        return await tool.execute(iid, {"answer": 1000})

    response, reward, _ = run(go())
    assert response.text == "Current parsed answer='1000' reward=1.0" and reward == 0.0


def test_gsm8k_tool_rejects_unknown_config():
    with pytest.raises(ValueError, match="`strict` is not supported yet"):
        Gsm8kTool({"strict": True})


@pytest.mark.parametrize(
    "expr, value",
    [
        ("47*38", 1786),
        ("(47 + 38) * 2", 170),
        ("7/2", 3.5),
        ("7//2", 3),
        ("-2**3", -8),
        ("2**-1", 0.5),
        ("sqrt(16)", 4.0),
        ("max(3, 9, 4)", 9),
        ("round(2.567, 2)", 2.57),
        ("10 % 4", 2),
    ],
)
def test_calculator_values(expr, value):
    assert evaluate_expression(expr) == value


@pytest.mark.parametrize(
    "expr, needle",
    [
        ("1/0", "division by zero"),
        ("__import__('os')", "unsupported syntax"),
        ("x + 1", "unsupported syntax: Name"),
        ("9**9**9", "exponent too large"),
        ("'a' * 3", "unsupported syntax: Constant"),
        ("1 +", "invalid expression"),
        ("2" * 300, "longer than 200"),
        ("(10**99)*(10**99)", "result too large"),
        ("sqrt(-1)", "sqrt: math domain error"),
    ],
)
def test_calculator_refuses(expr, needle):
    with pytest.raises(ToolError, match=needle.replace("(", r"\(").replace("*", r"\*")):
        evaluate_expression(expr)


def test_calculator_formats_and_runs_as_tool():
    assert [format_number(v) for v in (85, 85.0, 2 / 3, -0.5)] == ["85", "85", "0.6666666667", "-0.5"]

    async def go():
        s = ToolSession({"calculator": CalculatorTool({})})
        return await s.call(FunctionCall("calculator", {"expression": "12*12"})), await s.call(
            FunctionCall("calculator", {"expression": "1/0"})
        )

    ok, bad = run(go())
    assert (ok.response.text, ok.status) == ("144", "ok")
    assert (bad.response.text, bad.status) == ("Error: division by zero", "error")


def test_gsm8k_interaction_retry_then_correct():
    async def go():
        inter = Gsm8kInteraction({"name": "gsm8k"})
        iid = await inter.start_interaction(None, ground_truth="18", query="q")
        msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "I think #### 17"}]
        first = await inter.generate_response(iid, msgs)
        msgs += [{"role": "user", "content": first[1]}, {"role": "assistant", "content": "Sorry, 18."}]
        second = await inter.generate_response(iid, msgs)
        score = await inter.calculate_score(iid)
        await inter.finalize_interaction(iid)
        return first, second, score, inter._instances

    first, second, score, left = run(go())
    assert first == (False, RETRY_MESSAGE, 0.0, {})
    assert second == (True, CORRECT_MESSAGE, 1.0, {})
    assert score == 1.0 and left == {}
