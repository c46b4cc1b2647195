"""Function tools (``multi_turn.function_tool_path``) reach the tool agent loop and run through call_tool."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from verl.config.loader import load_config
from verl.tools import FunctionCall, call_tool
from verl.workers.rollout.agent_loop.manager import AgentLoopRollout

TOOLS = '''
from verl.tools.function_tool import function_tool

@function_tool("add_numbers")
def add(a: int, b: int) -> tuple:
    """Add two integers.

    Args:
        a: first.
        b: second.
    """
    return str(a + b), 0.5, {"calls": 1}
'''


def test_function_tool_path_loads_into_the_agent_loop(tmp_path: Path) -> None:
    path = tmp_path / "sum_tools.py"
    path.write_text(textwrap.dedent(TOOLS))
    cfg = load_config(
        None, ["actor_rollout_ref.rollout.name=hf", f"actor_rollout_ref.rollout.multi_turn.function_tool_path={path}"]
    )
    rollout = AgentLoopRollout(None, cfg.actor_rollout_ref.rollout, tokenizer=None)
    tool = rollout.tools["add_numbers"]
    assert tool.tool_schema["function"]["parameters"]["required"] == ["a", "b"]
    result = asyncio.run(call_tool(tool, "i0", FunctionCall("add_numbers", {"a": 2, "b": 40}), timeout_s=5.0))
    assert (result.response.text, result.reward, result.metrics, result.status) == ("42", 0.5, {"calls": 1}, "ok")


def test_multi_turn_enable_with_function_tools_only(tmp_path: Path) -> None:
    path = tmp_path / "only_tools.py"
    path.write_text(textwrap.dedent(TOOLS).replace("add_numbers", "add_only"))
    cfg = load_config(
        None,
        [
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.function_tool_path={path}",
        ],
    )
    assert "add_only" in AgentLoopRollout(None, cfg.actor_rollout_ref.rollout, tokenizer=None).tools
