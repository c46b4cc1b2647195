"""call_tool / ToolSession containment: raise, hang, garbage, truncation, lifecycle and counts."""

from __future__ import annotations

import asyncio
import time

import pytest

from verl.tools import BaseTool, FunctionCall, ToolError, ToolResponse, ToolSession, call_tool, truncate_tool_text


def _schema(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


class Scripted(BaseTool):
    """A tool whose execute does what the test asks (by the ``mode`` argument)."""

    def __init__(self, name="scripted"):
        super().__init__({}, _schema(name))
        self.created, self.released = [], []

    async def create(self, instance_id=None, **kwargs):
        self.created.append(kwargs)
        return "inst-1", ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        mode = parameters["mode"]
        if mode == "sleep":
            await asyncio.sleep(30)
        if mode == "raise":
            raise RuntimeError("kaboom")
        if mode == "tool_error":
            raise ToolError("bad input")
        if mode == "garbage":
            return 42
        if mode == "bad_response":
            return [1, 2], 0.0, {}
        if mode == "nan":
            return ToolResponse(text="x"), float("nan"), {}
        if mode == "string":
            return "plain text", 0.5, None
        if mode == "big":
            return ToolResponse(text="a" * 50 + "b" * 50), 0.0, {}
        if mode == "self_timeout":
            return ToolResponse(text="ran too long"), 0.0, {"status": "timeout"}
        return ToolResponse(text=f"ok {kwargs.get('k')}"), 1.0, {"m": 1}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.75

    async def release(self, instance_id, **kwargs):
        self.released.append(instance_id)


def run(coro):
    return asyncio.run(coro)


def call(mode):
    return FunctionCall("scripted", {"mode": mode})


def test_ok_call():
    r = run(call_tool(Scripted(), "i", call("ok"), 1.0, execute_kwargs={"k": 7}))
    assert (r.response.text, r.reward, r.metrics, r.status) == ("ok 7", 1.0, {"m": 1}, "ok")
    response, reward, metrics, status = r  # unpacks like the tuple the agent loop expects
    assert status == "ok"


def test_hang_past_timeout_is_contained():
    start = time.monotonic()
    r = run(call_tool(Scripted(), "i", call("sleep"), 0.2))
    assert time.monotonic() - start < 2.0
    assert r.status == "timeout" and r.reward == 0.0
    assert r.response.text == "Error: tool 'scripted' timed out after 0.2 s"


@pytest.mark.parametrize(
    "mode, text",
    [
        ("raise", "Error: tool 'scripted' raised RuntimeError: kaboom"),
        ("tool_error", "Error: bad input"),
        ("garbage", "Error: tool 'scripted' returned int; expected (ToolResponse, reward, metrics)"),
        ("bad_response", "Error: tool 'scripted' returned a list response; expected ToolResponse or str"),
        ("nan", "Error: tool 'scripted' returned reward nan; expected a finite number"),
    ],
)
def test_failures_become_error_responses(mode, text):
    r = run(call_tool(Scripted(), "i", call(mode), 1.0))
    assert r.status == "error" and r.response.text == text and r.reward == 0.0


def test_plain_string_response_is_accepted():
    r = run(call_tool(Scripted(), "i", call("string"), 1.0))
    assert (r.response.text, r.reward, r.metrics, r.status) == ("plain text", 0.5, {}, "ok")


def test_tool_reported_status_is_used():
    assert run(call_tool(Scripted(), "i", call("self_timeout"), 1.0)).status == "timeout"


@pytest.mark.parametrize(
    "side, expected",
    [
        ("left", "a" * 10 + "...(truncated)"),
        ("right", "(truncated)..." + "b" * 10),
        ("middle", "a" * 5 + "...(truncated)..." + "b" * 5),
    ],
)
def test_truncation_sides(side, expected):
    r = run(call_tool(Scripted(), "i", call("big"), 1.0, max_response_length=10, truncate_side=side))
    assert r.response.text == expected
    assert truncate_tool_text("short", 10, side) == "short"


def test_truncate_rejects_unknown_side():
    with pytest.raises(ValueError, match="left, right or middle"):
        truncate_tool_text("x" * 20, 10, "top")


def test_session_lifecycle_counts_and_rewards():
    tool = Scripted()
    tools_kwargs = {"scripted": {"create_kwargs": {"ground_truth": "5"}, "execute_kwargs": {"k": 3}}}

    async def trajectory():
        s = ToolSession({"scripted": tool}, tools_kwargs, timeout_s=0.2)
        results = [await s.call(call(m)) for m in ("ok", "raise", "sleep", "ok")]
        results.append(await s.call(FunctionCall("nope", {})))
        s.record_error("malformed tool call")
        rewards = await s.close()
        return s, results, rewards

    s, results, rewards = run(trajectory())
    assert [r.status for r in results] == ["ok", "error", "timeout", "ok", "error"]
    assert results[0].response.text == "ok 3"
    assert dict(s.counts) == {"ok": 2, "error": 3, "timeout": 1}
    # one instance per trajectory, created once with the row's create_kwargs (both verl styles)
    assert tool.created == [{"create_kwargs": {"ground_truth": "5"}, "ground_truth": "5"}]
    assert rewards == {"scripted": 0.75} and tool.released == ["inst-1"]


class BrokenCreate(Scripted):
    async def create(self, instance_id=None, **kwargs):
        raise OSError("no disk")


def test_session_contains_create_failure():
    async def go():
        s = ToolSession({"scripted": BrokenCreate()}, None)
        r = await s.call(call("ok"))
        return r, await s.close()

    r, rewards = run(go())
    assert r.status == "error" and r.response.text == "Error: tool 'scripted' failed to start: OSError: no disk"
    assert rewards == {}
