"""Plain Python functions as tools (verl's ``verl.tools.function_tool``; ``multi_turn.function_tool_path``).

A user file decorates functions::

    from verl.tools.function_tool import function_tool

    @function_tool("lookup")          # or @function_tool() / bare @function_tool: the function's name
    async def lookup(city: str, metric: bool = True) -> str:
        '''Current weather of a city.

        Args:
            city: the city name.
            metric: Celsius when true.
        '''
        return "21 C"

and ``actor_rollout_ref.rollout.multi_turn.function_tool_path=my_tools.py`` makes every decorated
function a tool of the tool agent loop (beside those of ``tool_config_path``). The schema is
inferred from the signature and the Google-style docstring by ``transformers.utils.get_json_schema``
(every argument needs a type hint and an ``Args:`` line; ``*args`` / ``**kwargs`` are refused) unless
``schema=`` gives it (a dict or an `OpenAIFunctionToolSchema`). A sync function runs in a worker
thread. It returns a string, a `ToolResponse`, a dict (sent as JSON), any object (sent as ``str``),
or a tuple ``(response, reward)`` / ``(response, reward, metrics)`` (`normalize_function_tool_return`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from verl.tools.base import BaseTool, ToolResponse
from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = [
    "FUNCTION_TOOL_REGISTRY",
    "FunctionTool",
    "FunctionToolAdapter",
    "function_tool",
    "get_function_tool",
    "load_function_tools_from_path",
    "normalize_function_tool_return",
]

logger = logging.getLogger(__name__)

FUNCTION_TOOL_REGISTRY: dict[str, "FunctionTool"] = {}
"""Every decorated function of this process, by tool name."""

_LOADED_FUNCTION_TOOL_PATHS: dict[str, list["FunctionTool"]] = {}
"""Tools each loaded file added (a file is executed once per process)."""


@dataclass
class FunctionTool:
    """A registered function: ``name``, the callable ``fn``, its ``tool_schema`` and whether it is a coroutine."""

    name: str
    fn: Callable[..., Any]
    tool_schema: OpenAIFunctionToolSchema
    is_async: bool

    async def call(self, arguments: dict[str, Any]) -> Any:
        """``fn(**arguments)``: awaited, or run in a worker thread for a sync function; returns its raw result."""
        if self.is_async:
            return await self.fn(**arguments)
        return await asyncio.to_thread(self.fn, **arguments)


def _schema_of(fn: Callable[..., Any], name: str, schema: Any) -> OpenAIFunctionToolSchema:
    if isinstance(schema, OpenAIFunctionToolSchema):
        return schema
    if schema is not None:
        return OpenAIFunctionToolSchema.model_validate(schema)
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(
                f"function tool {name!r}: variadic parameter {p.name!r} cannot be a JSON property; "
                f"take a list instead (e.g. {p.name}: list[int])"
            )
    from transformers.utils import get_json_schema

    inferred = get_json_schema(fn)
    inferred["function"].pop("return", None)
    inferred["function"]["name"] = name
    return OpenAIFunctionToolSchema.model_validate(inferred)


def _register(fn: Callable[..., Any], name: str, schema: Any) -> Callable[..., Any]:
    existing = FUNCTION_TOOL_REGISTRY.get(name)
    if existing is not None and existing.fn is not fn:
        raise ValueError(
            f"function tool {name!r} is already registered (by {existing.fn.__module__}.{existing.fn.__qualname__})"
        )
    FUNCTION_TOOL_REGISTRY[name] = FunctionTool(name, fn, _schema_of(fn, name, schema), inspect.iscoroutinefunction(fn))
    return fn


def function_tool(name: Union[str, Callable[..., Any], None] = None, *, schema: Any = None) -> Any:
    """Register a function as a tool: ``@function_tool("name")``, ``@function_tool()`` or bare ``@function_tool``.

    Returns the function unchanged.

    Raises:
        ValueError: the name is taken by another function, or a ``*args`` / ``**kwargs`` parameter.
        transformers' DocstringParsingException / TypeHintParsingException: no docstring, an argument
            without a type hint or without an ``Args:`` description (when ``schema`` is not given).
    """
    if callable(name):
        return _register(name, name.__name__, schema)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _register(fn, name or fn.__name__, schema)

    return decorator


def get_function_tool(name: str) -> FunctionTool:
    """The registered tool ``name``.

    Raises:
        KeyError: no such tool (the registered names listed).
    """
    if name not in FUNCTION_TOOL_REGISTRY:
        raise KeyError(f"no function tool {name!r}; registered: {sorted(FUNCTION_TOOL_REGISTRY)}")
    return FUNCTION_TOOL_REGISTRY[name]


def load_function_tools_from_path(path: str) -> list[FunctionTool]:
    """Execute a ``.py`` file (once per process; a relative path is resolved against the working
    directory) and return the tools its ``@function_tool`` decorators registered.

    Raises:
        FileNotFoundError: the file does not exist.
    """
    resolved = str(Path(os.path.expanduser(path)).resolve())
    if resolved in _LOADED_FUNCTION_TOOL_PATHS:
        return list(_LOADED_FUNCTION_TOOL_PATHS[resolved])
    if not os.path.isfile(resolved):
        raise FileNotFoundError(f"function_tool_path does not exist: {path} (resolved to {resolved})")
    before = set(FUNCTION_TOOL_REGISTRY)
    spec = importlib.util.spec_from_file_location(f"verl_function_tools_{abs(hash(resolved))}", resolved)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    tools = [tool for name, tool in FUNCTION_TOOL_REGISTRY.items() if name not in before]
    if not tools:
        logger.warning("no @function_tool decorators found in %s", resolved)
    _LOADED_FUNCTION_TOOL_PATHS[resolved] = tools
    return list(tools)


def _coerce_response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=str(value))


def normalize_function_tool_return(ret: Any) -> tuple[ToolResponse, float, dict[str, Any]]:
    """A function tool's result as ``(ToolResponse, reward, metrics)``.

    ``str`` -> its text; `ToolResponse` -> itself; ``dict`` -> JSON text; a tuple of length 1-3 ->
    ``(response, reward, metrics)`` with ``None`` reward 0.0 and ``None`` metrics ``{}``; anything
    else -> ``str(ret)``. Reward 0.0 and metrics ``{}`` when not given.

    Raises:
        TypeError: a tuple of length 0 or more than 3.
    """
    if isinstance(ret, tuple):
        if not 1 <= len(ret) <= 3:
            raise TypeError(
                f"a function tool returning a tuple must return length 1, 2, or 3 "
                f"(response, reward, metrics); got length {len(ret)}"
            )
        reward: Optional[Any] = ret[1] if len(ret) > 1 else None
        metrics: Optional[Any] = ret[2] if len(ret) > 2 else None
        return (
            _coerce_response(ret[0]),
            0.0 if reward is None else float(reward),
            {} if metrics is None else dict(metrics),
        )
    return _coerce_response(ret), 0.0, {}


class FunctionToolAdapter(BaseTool):
    """A `FunctionTool` behind the `BaseTool` interface the tool agent loop calls (one per tool name)."""

    def __init__(self, tool: FunctionTool) -> None:
        self.function = tool
        super().__init__({}, tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True))

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Call the function with the parsed arguments; its result normalised."""
        return normalize_function_tool_return(await self.function.call(dict(parameters)))
