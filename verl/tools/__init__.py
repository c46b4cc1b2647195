"""Tools (function calling) and interactions (user simulators) for multi-turn rollouts.

Stable API used by the agent loop (names and signatures do not change):

* ``load_tools(tool_config_path) -> dict[str, BaseTool]`` — verl's tool YAML (`registry`).
* ``tool_schemas(tools) -> list[dict]`` — for ``apply_chat_template(..., tools=...)``;
  ``load_tool_schemas(tool_config_path)`` — those of a config file's tools.
* ``parse_tool_calls(text, tools, max_parallel_calls) -> (content, list[FunctionCall], list[str])``
  and ``parse_tool_calls_ordered(...) -> (content, list[ParsedToolCall])`` — ``format=hermes``
  (`parser`); ``render_tool_call(call)``, ``render_tool_response(text)``.
* ``async call_tool(tool, instance_id, call, timeout_s, *, max_response_length, truncate_side,
  execute_kwargs) -> ToolCallResult(response, reward, metrics, status)``, status in
  ``STATUSES = ("ok", "error", "timeout")`` (`calling`); ``truncate_tool_text(text, n, side)``.
* ``ToolSession(tools, tools_kwargs, *, timeout_s, max_response_length, truncate_side)`` —
  per-trajectory lifecycle: ``await s.call(call)``, ``s.record_error(msg)``, ``s.counts``,
  ``await s.close() -> {tool name: calc_reward}``.
* ``load_interactions(interaction_config_path) -> dict[str, BaseInteraction]`` and
  ``select_interaction(interactions, interaction_kwargs)`` (`verl.interactions`).
* Built-in tools: ``Gsm8kTool`` (``calc_gsm8k_reward``), ``CalculatorTool`` (``calculator``),
  ``PythonCodeTool`` (``code_interpreter``, runs in `verl.tools.sandbox`).
"""

from __future__ import annotations

from verl.tools.base import BaseInteraction, BaseTool, FunctionCall, ToolError, ToolResponse
from verl.tools.calling import STATUSES, ToolCallResult, ToolSession, call_tool, error_result, truncate_tool_text
from verl.tools.parser import (
    ParsedToolCall,
    parse_tool_calls,
    parse_tool_calls_ordered,
    render_tool_call,
    render_tool_response,
    validate_arguments,
)
from verl.tools.registry import ToolConfigError, load_tool_schemas, load_tools, tool_schemas

__all__ = [
    "STATUSES",
    "BaseInteraction",
    "BaseTool",
    "FunctionCall",
    "ParsedToolCall",
    "ToolCallResult",
    "ToolConfigError",
    "ToolError",
    "ToolResponse",
    "ToolSession",
    "call_tool",
    "error_result",
    "load_tool_schemas",
    "load_tools",
    "parse_tool_calls",
    "parse_tool_calls_ordered",
    "render_tool_call",
    "render_tool_response",
    "tool_schemas",
    "truncate_tool_text",
    "validate_arguments",
]
