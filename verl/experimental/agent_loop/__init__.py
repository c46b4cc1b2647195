"""verl's ``verl.experimental.agent_loop``: ``AgentLoopBase``, ``AgentLoopOutput``, ``register`` (see `.agent_loop`)."""

from __future__ import annotations

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, ToolListWrap, register

__all__ = ["AgentLoopBase", "AgentLoopOutput", "ToolListWrap", "register"]
