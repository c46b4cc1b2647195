"""Tool-call parsing for ``multi_turn.format=hermes`` and rendering in the same format.

The Hermes / Qwen2.5 format puts each call in its own block inside the assistant's text::

    <think>I should compute 47*38 first.</think>
    Let me compute that.
    <tool_call>
    {"name": "calculator", "arguments": {"expression": "47*38"}}
    </tool_call>

Where each block starts and ends is decided by `verl.utils.hermes.scan_tool_blocks` (a
JSON-aware left-to-right scan that skips ``<think>`` reasoning; the reward scorers cut blocks out
with the same scanner). With ``in_reasoning=True`` (the prompt's generation prompt already opened
``<think>``) the turn starts inside reasoning and calls count only after its first ``</think>``;
a stray ``</think>`` is otherwise plain text (the agent loop passes ``in_reasoning`` from the
prompt instead of guessing it, unlike the answer-level `verl.utils.reasoning.strip_reasoning`).

:func:`parse_tool_calls` never raises on model output: a malformed block, an unknown tool name
or arguments that fail the tool's JSON schema (checked with the ``jsonschema`` library) become
error strings that the agent loop turns into error tool responses and counts.

Reference: the Hermes function-calling format (NousResearch/Hermes-Function-Calling) as used by
the Qwen2.5 chat template and verl's ``HermesToolParser``; ``<think>`` blocks as Qwen3 and
DeepSeek-R1 write them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from verl.tools.base import BaseTool, FunctionCall
from verl.utils.hermes import TOOL_CALL_END, TOOL_CALL_START, scan_tool_blocks

__all__ = [
    "ParsedToolCall",
    "parse_tool_calls",
    "parse_tool_calls_ordered",
    "render_tool_call",
    "render_tool_response",
    "validate_arguments",
]


@dataclass
class ParsedToolCall:
    """One ``<tool_call>`` block in text order: exactly one of ``call`` / ``error`` is set."""

    call: FunctionCall | None = None
    error: str | None = None


def validate_arguments(tool: BaseTool, arguments: dict[str, Any]) -> str | None:
    """Checks call arguments against the tool's parameters JSON Schema.

    Returns:
        None when valid, else a one-line message naming the tool and the failing field.
    """
    schema = tool.parameters_schema
    if not schema:
        return None
    validator_cls = jsonschema.validators.validator_for(schema)
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(arguments))
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path)
    at = f" at '{path}'" if path else ""
    return f"invalid arguments for tool '{tool.name}'{at}: {error.message}"


def _check_call(obj: Any, tools: dict[str, BaseTool]) -> ParsedToolCall:
    """A decoded block body as a call, or the reason it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParsedToolCall(error='malformed tool call: expected {"name": <string>, "arguments": {...}}')
    name = obj["name"]
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):
        # some models emit the arguments as a JSON-encoded string (OpenAI's wire format)
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return ParsedToolCall(error=f"malformed tool call to '{name}': arguments are not a JSON object")
    if not isinstance(arguments, dict):
        return ParsedToolCall(error=f"malformed tool call to '{name}': arguments must be a JSON object")
    tool = tools.get(name)
    if tool is None:
        valid = ", ".join(sorted(tools)) or "none"
        return ParsedToolCall(error=f"unknown tool '{name}'; available tools: {valid}")
    problem = validate_arguments(tool, arguments)
    if problem is not None:
        return ParsedToolCall(error=problem)
    return ParsedToolCall(call=FunctionCall(name=name, arguments=arguments))


def _scan(text: str, tools: dict[str, BaseTool], in_reasoning: bool) -> tuple[str, list[ParsedToolCall]]:
    """`scan_tool_blocks`, each decoded block checked as a call to one of ``tools``."""
    content, blocks = scan_tool_blocks(text, in_reasoning=in_reasoning)
    return content, [
        ParsedToolCall(error=b.error) if b.error is not None else _check_call(b.value, tools) for b in blocks
    ]


def parse_tool_calls_ordered(
    text: str, tools: dict[str, BaseTool], max_parallel_calls: int = 1, *, in_reasoning: bool = False
) -> tuple[str, list[ParsedToolCall]]:
    """Parses the ``<tool_call>`` blocks of one assistant turn, keeping their order.

    Args:
        text: decoded assistant turn.
        tools: ``{name: tool}`` from `verl.tools.load_tools`.
        max_parallel_calls: at most this many blocks are executed (``multi_turn.max_parallel_calls``);
            extra blocks give one error entry saying how many were ignored.
        in_reasoning: the turn starts inside a ``<think>`` block that the prompt opened (its
            generation prompt ends with ``<think>``): calls count only after the first ``</think>``.

    Returns:
        ``(content, parsed)``: the text with the blocks outside reasoning removed (reasoning is
        kept verbatim), and one `ParsedToolCall` per such block (a ``<tool_call>`` without its
        end tag is an error entry too). Blocks inside reasoning give no entry.

    Raises:
        ValueError: ``max_parallel_calls < 1`` (a configuration error, not model output).
    """
    if max_parallel_calls < 1:
        raise ValueError(f"max_parallel_calls must be >= 1, got {max_parallel_calls}")
    content, parsed = _scan(text, tools, in_reasoning)
    if len(parsed) > max_parallel_calls:
        ignored = len(parsed) - max_parallel_calls
        parsed = parsed[:max_parallel_calls]
        parsed.append(ParsedToolCall(error=f"{ignored} tool call(s) ignored: at most {max_parallel_calls} per turn"))
    return content, parsed


def parse_tool_calls(
    text: str, tools: dict[str, BaseTool], max_parallel_calls: int = 1, *, in_reasoning: bool = False
) -> tuple[str, list[FunctionCall], list[str]]:
    """Parses Hermes tool calls: ``(content_without_calls, valid calls, error strings)``.

    Same rules as :func:`parse_tool_calls_ordered`; valid calls and errors are each in text
    order (answer the calls first, then one error tool response per error string).
    """
    content, parsed = parse_tool_calls_ordered(text, tools, max_parallel_calls, in_reasoning=in_reasoning)
    calls = [p.call for p in parsed if p.call is not None]
    errors = [p.error for p in parsed if p.error is not None]
    return content, calls, errors


def render_tool_call(call: FunctionCall) -> str:
    """One call as the Qwen2.5 / Hermes template writes it (``<tool_call>\\n{json}\\n</tool_call>``)."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_START}\n{body}\n{TOOL_CALL_END}"


def render_tool_response(text: str) -> str:
    """One tool response as the Qwen2.5 / Hermes template wraps it inside its user turn.

    For tokenizers without a tool-aware chat template; with one, the agent loop sends
    ``{"role": "tool", "content": text}`` messages to ``apply_chat_template`` instead.
    """
    return f"<tool_response>\n{text}\n</tool_response>"
