"""verl's ``verl.experimental.agent_loop.agent_loop``: ``AgentLoopBase``, ``AgentLoopOutput``, ``register``,
``ToolListWrap``.

The implementation (agent loops written against verl's API running on the product's rollout) is
`verl.workers.rollout.agent_loop.verl_api`.
"""

from __future__ import annotations

from verl.workers.rollout.agent_loop.verl_api import (
    AgentLoopBase,
    AgentLoopOutput,
    ServerManager,
    ToolListWrap,
    load_agent_loop_config,
    register,
)

__all__ = ["AgentLoopBase", "AgentLoopOutput", "ServerManager", "ToolListWrap", "load_agent_loop_config", "register"]
