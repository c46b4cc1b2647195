"""Agent loops (verl's AgentLoop shape): ``single_turn_agent`` and ``tool_agent``, chosen per row.

`AgentLoopRollout` wraps a rollout engine so each row of a prompt batch runs through its agent
loop on the engine's token-level request API and comes back in the usual `DataProto` layout;
`wrap_rollout_engine` applies it when the config asks for agent loops.
"""

from __future__ import annotations

from typing import Any

from verl.workers.rollout.agent_loop import single_turn as _single_turn  # noqa: F401  (registers)
from verl.workers.rollout.agent_loop import tool_agent as _tool_agent  # noqa: F401  (registers)
from verl.workers.rollout.agent_loop.base import AGENT_LOOPS, AgentContext, AgentLoopOutput, AgentRow
from verl.workers.rollout.agent_loop.chat import ChatTemplate, TokenizationMismatch
from verl.workers.rollout.agent_loop.manager import AgentLoopRollout

__all__ = [
    "AGENT_LOOPS",
    "AgentContext",
    "AgentLoopOutput",
    "AgentLoopRollout",
    "AgentRow",
    "ChatTemplate",
    "TokenizationMismatch",
    "wrap_rollout_engine",
]


def wrap_rollout_engine(engine: Any, config: Any, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> Any:
    """The engine wrapped in `AgentLoopRollout` (rows may name any agent loop with ``agent_name``).

    Single-turn batches in ``rollout.mode=sync`` still use the engine's batched
    ``generate_sequences`` directly, so wrapping never changes single-turn runs.
    """
    return AgentLoopRollout(engine, config, tokenizer, template_kwargs)
