"""verl's import path of the tool base class (``verl.tools.base_tool.BaseTool``)."""

from __future__ import annotations

from verl.tools.base import BaseTool, ToolResponse

__all__ = ["BaseTool", "ToolResponse"]
