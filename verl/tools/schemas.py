"""verl's import path of ``ToolResponse`` (``verl.tools.schemas``).

Tool schemas are plain OpenAI-format dicts here (verl wraps them in a pydantic model).
"""

from __future__ import annotations

from verl.tools.base import FunctionCall, ToolResponse

__all__ = ["FunctionCall", "ToolResponse"]
