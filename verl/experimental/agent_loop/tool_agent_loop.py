"""verl's ``verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop``: the product's ``tool_agent`` loop."""

from __future__ import annotations

from verl.workers.rollout.agent_loop.tool_agent import ToolAgentLoop

__all__ = ["ToolAgentLoop"]
