"""Tools (function calling) and interactions (user simulators) for multi-turn rollouts."""

from __future__ import annotations

from verl.tools.base import BaseInteraction, BaseTool, FunctionCall, ToolResponse

__all__ = ["BaseInteraction", "BaseTool", "FunctionCall", "ToolResponse"]
