"""Contained tool calls: a tool that raises, hangs or returns garbage never ends the run.

:func:`call_tool` wraps one ``tool.execute`` and always returns a :class:`ToolCallResult`
``(response, reward, metrics, status)`` with ``status`` one of :data:`STATUSES`:

* ``ok`` — the tool returned ``(ToolResponse | str, reward, metrics)``;
* ``error`` — it raised (`ToolError` → ``"Error: <message>"``; anything else → ``"Error: tool
  '<name>' raised <Type>: <message>"``), or returned something else, or a non-finite reward;
* ``timeout`` — it did not finish within ``timeout_s`` (the coroutine is cancelled; a sandboxed
  tool kills its process group on cancellation).

A tool may also report its own failure in-band by returning ``metrics["status"]`` =
``"error"`` / ``"timeout"`` (the code interpreter does, for code that crashed or ran too long).

Limit: the timeout acts on the event loop, so it stops coroutines that await (I/O, sleeps,
subprocesses); a tool that blocks the loop in plain Python (``time.sleep`` inside ``async def``)
cannot be interrupted from the same thread. Built-in tools never block; long work belongs in
a subprocess (`verl.tools.sandbox`) or ``asyncio.to_thread``.

:class:`ToolSession` is the per-trajectory lifecycle (verl's): an instance of each tool is
created on its first call with the row's ``extra_info.tools_kwargs[<name>].create_kwargs``,
``calc_reward`` and ``release`` run when the trajectory ends.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import Any, Literal, NamedTuple

from verl.tools.base import BaseTool, FunctionCall, ToolError, ToolResponse

__all__ = ["STATUSES", "ToolCallResult", "ToolSession", "call_tool", "error_result", "truncate_tool_text"]

STATUSES = ("ok", "error", "timeout")
TruncateSide = Literal["left", "right", "middle"]


class ToolCallResult(NamedTuple):
    """Outcome of one tool call (unpacks as ``response, reward, metrics, status``)."""

    response: ToolResponse
    reward: float
    metrics: dict[str, Any]
    status: str


def error_result(message: str, status: str = "error") -> ToolCallResult:
    """A failed call: the model reads ``message`` as the tool's response; reward 0."""
    return ToolCallResult(ToolResponse(text=message), 0.0, {}, status)


def truncate_tool_text(text: str, max_length: int | None, side: TruncateSide = "middle") -> str:
    """Cuts a tool response to ``max_length`` characters (verl's ``tool_response_truncate_side``).

    Args:
        text: the response.
        max_length: ``multi_turn.max_tool_response_length`` in characters; None = no limit.
        side: ``left`` keeps the first ``max_length`` characters + ``"...(truncated)"``;
            ``right`` keeps the last ones after ``"(truncated)..."``; ``middle`` keeps
            ``max_length // 2`` of each end around ``"...(truncated)..."``.

    Raises:
        ValueError: unknown ``side`` or negative ``max_length``.
    """
    if side not in ("left", "right", "middle"):
        raise ValueError(f"tool_response_truncate_side must be left, right or middle, got {side!r}")
    if max_length is None or len(text) <= max_length:
        return text
    if max_length < 0:
        raise ValueError(f"max_tool_response_length must be >= 0, got {max_length}")
    if side == "left":
        return text[:max_length] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + (text[-max_length:] if max_length else "")
    half = max_length // 2
    return text[:half] + "...(truncated)..." + (text[-half:] if half else "")


def _check_result(tool_name: str, result: Any) -> ToolCallResult:
    """Validates what ``execute`` returned; garbage becomes an ``error`` result."""
    if not (isinstance(result, tuple) and len(result) == 3):
        return error_result(
            f"Error: tool '{tool_name}' returned {type(result).__name__}; expected (ToolResponse, reward, metrics)"
        )
    response, reward, metrics = result
    if isinstance(response, str):
        response = ToolResponse(text=response)
    if not isinstance(response, ToolResponse) or not isinstance(response.text, (str, type(None))):
        return error_result(
            f"Error: tool '{tool_name}' returned a {type(response).__name__} response; expected ToolResponse or str"
        )
    if reward is None:
        reward = 0.0
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return error_result(f"Error: tool '{tool_name}' returned reward {reward!r}; expected a finite number")
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        return error_result(
            f"Error: tool '{tool_name}' returned metrics of type {type(metrics).__name__}; expected dict"
        )
    status = metrics.get("status", "ok")
    return ToolCallResult(response, float(reward), metrics, status if status in STATUSES else "ok")


async def call_tool(
    tool: BaseTool,
    instance_id: str,
    call: FunctionCall,
    timeout_s: float | None,
    *,
    max_response_length: int | None = None,
    truncate_side: TruncateSide = "middle",
    execute_kwargs: dict[str, Any] | None = None,
) -> ToolCallResult:
    """Runs ``tool.execute(instance_id, call.arguments, **execute_kwargs)``, contained.

    Args:
        tool: the tool (``call.name`` should be ``tool.name``).
        instance_id: from ``tool.create``.
        call: the parsed call (arguments already checked against the schema).
        timeout_s: wall-clock limit in seconds; None = no limit.
        max_response_length: characters kept of the response text (see :func:`truncate_tool_text`).
        truncate_side: ``left`` | ``right`` | ``middle``.
        execute_kwargs: extra keyword arguments (``tools_kwargs[name].execute_kwargs``).

    Returns:
        A `ToolCallResult`; never raises for anything the tool does (only ``CancelledError`` of
        the caller itself propagates).
    """
    try:
        coro = tool.execute(instance_id, dict(call.arguments), **(execute_kwargs or {}))
        result = await asyncio.wait_for(coro, timeout=timeout_s)
    except asyncio.TimeoutError:
        outcome = error_result(f"Error: tool '{tool.name}' timed out after {timeout_s:g} s", status="timeout")
    except ToolError as e:
        outcome = error_result(f"Error: {e}")
    except Exception as e:  # any bug in a tool becomes a message to the model, never a crash
        outcome = error_result(f"Error: tool '{tool.name}' raised {type(e).__name__}: {e}")
    else:
        outcome = _check_result(tool.name, result)
    text = truncate_tool_text(outcome.response.text or "", max_response_length, truncate_side)
    return outcome._replace(response=ToolResponse(text=text))


def _lifecycle_kwargs(tools_kwargs: dict[str, Any] | None, name: str, key: str) -> dict[str, Any]:
    entry = (tools_kwargs or {}).get(name) or {}
    value = entry.get(key) or {}
    return dict(value) if isinstance(value, dict) else {}


class ToolSession:
    """The tools of one trajectory: create on first call, execute contained, reward, release.

    Args:
        tools: ``{name: tool}`` shared by all trajectories (instances keep per-trajectory state).
        tools_kwargs: the row's ``extra_info.tools_kwargs``: ``{name: {create_kwargs,
            execute_kwargs, calc_reward_kwargs, release_kwargs}}`` (each optional).
        timeout_s: per-call limit in seconds (also applied to ``create``).
        max_response_length: characters, see :func:`truncate_tool_text`.
        truncate_side: ``left`` | ``right`` | ``middle``.

    ``counts`` holds the number of calls per status (``ok``/``error``/``timeout``).
    """

    def __init__(
        self,
        tools: dict[str, BaseTool],
        tools_kwargs: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = 30.0,
        max_response_length: int | None = None,
        truncate_side: TruncateSide = "middle",
    ) -> None:
        self.tools = tools
        self.tools_kwargs = tools_kwargs or {}
        self.timeout_s = timeout_s
        self.max_response_length = max_response_length
        self.truncate_side = truncate_side
        self.instances: dict[str, str] = {}
        self.counts: Counter[str] = Counter({s: 0 for s in STATUSES})

    async def _instance(self, name: str) -> str:
        if name not in self.instances:
            create_kwargs = _lifecycle_kwargs(self.tools_kwargs, name, "create_kwargs")
            # verl's tools read either the keywords themselves or create_kwargs=...: give both
            coro = self.tools[name].create(None, create_kwargs=create_kwargs, **create_kwargs)
            instance_id, _ = await asyncio.wait_for(coro, timeout=self.timeout_s)
            self.instances[name] = instance_id
        return self.instances[name]

    async def call(self, call: FunctionCall) -> ToolCallResult:
        """Runs one parsed call (creating the tool's instance first if needed); never raises."""
        tool = self.tools.get(call.name)
        if tool is None:
            result = error_result(f"Error: unknown tool '{call.name}'")
        else:
            try:
                instance_id = await self._instance(call.name)
            except asyncio.TimeoutError:
                result = error_result(f"Error: tool '{call.name}' timed out while starting", status="timeout")
            except Exception as e:  # a failing create is the tool's bug, not the run's
                result = error_result(f"Error: tool '{call.name}' failed to start: {type(e).__name__}: {e}")
            else:
                result = await call_tool(
                    tool,
                    instance_id,
                    call,
                    self.timeout_s,
                    max_response_length=self.max_response_length,
                    truncate_side=self.truncate_side,
                    execute_kwargs=_lifecycle_kwargs(self.tools_kwargs, call.name, "execute_kwargs"),
                )
        self.counts[result.status] += 1
        return result

    def record_error(self, message: str) -> ToolCallResult:
        """A parse error (from `verl.tools.parser`) as an ``error`` result, counted like a call."""
        self.counts["error"] += 1
        return error_result(f"Error: {message}")

    async def close(self) -> dict[str, float]:
        """Asks each created instance for its reward, then releases it; never raises.

        Returns:
            ``{tool name: calc_reward}`` for tools that were called (a failing ``calc_reward``
            counts 0.0).
        """
        rewards: dict[str, float] = {}
        for name, instance_id in self.instances.items():
            tool = self.tools[name]
            try:
                coro = tool.calc_reward(instance_id, **_lifecycle_kwargs(self.tools_kwargs, name, "calc_reward_kwargs"))
                value = await asyncio.wait_for(coro, timeout=self.timeout_s)
                rewards[name] = float(value) if value is not None and math.isfinite(float(value)) else 0.0
            except Exception:  # a broken reward hook must not end the run; the call counts as 0
                rewards[name] = 0.0
            try:
                await asyncio.wait_for(
                    tool.release(instance_id, **_lifecycle_kwargs(self.tools_kwargs, name, "release_kwargs")),
                    timeout=self.timeout_s,
                )
            except Exception:  # release is best effort: the instance is dropped either way
                pass
        self.instances.clear()
        return rewards
