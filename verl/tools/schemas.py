"""verl's import path of the tool schema models and ``ToolResponse`` (``verl.tools.schemas``).

Tools here pass their schemas around as plain OpenAI-format dicts; verl's pydantic models are
offered for user code written against verl (``OpenAIFunctionToolSchema.model_validate(d)``,
``.model_dump(exclude_none=True)`` gives the dict back). As in verl, a property's ``type`` may be a
list (``["integer", "number"]`` for ``int | float``) and ``enum`` may hold any JSON values;
other JSON Schema fields (``items``, ``anyOf``, ...) are kept.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from verl.tools.base import FunctionCall, ToolResponse

__all__ = [
    "FunctionCall",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
]


class OpenAIFunctionPropertySchema(BaseModel):
    """One argument: JSON type(s), description, allowed values."""

    model_config = ConfigDict(extra="allow")
    type: Optional[Union[str, list[str]]] = None
    description: Optional[str] = None
    enum: Optional[list[Any]] = None


class OpenAIFunctionParametersSchema(BaseModel):
    """The arguments object: ``{"type": "object", "properties": {...}, "required": [...]}``."""

    model_config = ConfigDict(extra="allow")
    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    """A function: name, description and parameters."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=OpenAIFunctionParametersSchema)
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """``{"type": "function", "function": {...}}`` (the chat template's ``tools`` entries)."""

    model_config = ConfigDict(extra="allow")
    type: str = "function"
    function: OpenAIFunctionSchema
