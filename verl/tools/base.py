"""Tool and interaction seams for multi-turn rollouts, in verl's shape.

`BaseTool` follows verl's lifecycle: one instance per trajectory is created with the row's
``extra_info.tools_kwargs[<tool name>].create_kwargs``, then ``execute`` is called once per tool
call the model makes, ``calc_reward`` may be asked for the trajectory's tool reward, and
``release`` frees the instance. All methods are coroutines so an agent loop can run many
trajectories concurrently.

`BaseInteraction` is the user simulator: ``start_interaction`` per trajectory, then
``generate_response`` after every assistant turn, returning whether to stop, the user's text, a
turn score and metadata.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BaseInteraction", "BaseTool", "FunctionCall", "ToolError", "ToolResponse", "check_config_keys"]


class ToolError(Exception):
    """A failure the model should read about (bad input, division by zero, ...).

    `verl.tools.calling.call_tool` turns it into the tool response ``"Error: <message>"`` with
    status ``error``; any other exception gets the same treatment plus its type name.
    """


@dataclass
class ToolResponse:
    """What a tool returns to the model (text only on this product; images / video are not supported)."""

    text: str | None = None


@dataclass
class FunctionCall:
    """One parsed tool call: the function name and its JSON arguments (a dict)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class BaseTool:
    """Base class of tools (verl's ``verl.tools.base_tool.BaseTool`` signatures).

    Args:
        config: the tool's ``config`` mapping from the tool config file.
        tool_schema: the tool's OpenAI function schema, a dict
            ``{"type": "function", "function": {"name", "description", "parameters"}}``.
    """

    def __init__(self, config: dict[str, Any], tool_schema: dict[str, Any] | None) -> None:
        self.config = dict(config or {})
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        if not self.tool_schema:
            raise ValueError(f"{type(self).__name__}: no tool_schema given and none built in")
        self.name: str = self.tool_schema["function"]["name"]

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON Schema of the call's arguments (``tool_schema.function.parameters``; ``{}`` = any)."""
        return dict(self.tool_schema["function"].get("parameters") or {})

    def get_openai_tool_schema(self) -> dict[str, Any]:
        """The OpenAI function schema (a subclass may build one in)."""
        return getattr(self, "tool_schema", None) or {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Create the per-trajectory instance; returns (instance_id, creation response)."""
        return instance_id or str(uuid.uuid4()), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call; returns (response to the model, step reward, metrics)."""
        raise NotImplementedError

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The trajectory's tool reward (default 0)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Free the instance."""


class BaseInteraction:
    """Base class of interactions / user simulators (verl's ``BaseInteraction`` signatures).

    Args:
        config: the interaction's ``config`` mapping; ``config["name"]`` is the name rows select
            with ``extra_info.interaction_kwargs.name``.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config or {})
        self.name: str = self.config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Create the per-trajectory state; returns its id."""
        return instance_id or str(uuid.uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict]:
        """After an assistant turn: (should_terminate, user response text, turn score, metadata)."""
        raise NotImplementedError

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        """The trajectory's interaction score (default 0)."""
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Free the per-trajectory state."""


def check_config_keys(config: dict[str, Any], allowed: set[str], owner: str) -> None:
    """Rejects config keys a tool or interaction does not implement (never silently ignored).

    ``type`` is always allowed: the tool loader consumes it (``type: native``).

    Raises:
        ValueError: ``"`<key>` is not supported yet: ..."`` naming the valid keys.
    """
    for key in sorted(set(config) - allowed - {"type"}):
        valid = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"`{key}` is not supported yet: {owner} accepts config keys: {valid}")
