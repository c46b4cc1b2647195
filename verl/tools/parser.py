"""Tool-call parsing for ``multi_turn.format=hermes`` and rendering in the same format.

The Hermes / Qwen2.5 format puts each call in its own block inside the assistant's text::

    <think>I should compute 47*38 first.</think>
    Let me compute that.
    <tool_call>
    {"name": "calculator", "arguments": {"expression": "47*38"}}
    </tool_call>

The scanner reads the turn left to right. After ``<tool_call>`` (and any whitespace) it decodes
one JSON value with ``json.JSONDecoder.raw_decode``, so the arguments are arbitrary JSON whose
strings may hold any character, the format's own tags included; after the value (and any
whitespace) it requires ``</tool_call>``. Reasoning is skipped: text from ``<think>`` to the next
``</think>`` is never searched for calls (a draft call while thinking does not run). An unclosed
``<think>`` makes the rest of the turn reasoning, so a turn cut off while thinking runs nothing;
with ``in_reasoning=True`` (the prompt's generation prompt already opened ``<think>``) the turn
starts inside reasoning and calls count only after its first ``</think>``. The tags are those of
`verl.utils.reasoning`; unlike its text-level ``strip_reasoning`` (for answers), a tag inside a
call's JSON string is data here, and a stray ``</think>`` is plain text (the agent loop passes
``in_reasoning`` from the prompt instead of guessing it).

:func:`parse_tool_calls` never raises on model output: a malformed block, an unknown tool name
or arguments that fail the tool's JSON schema (checked with the ``jsonschema`` library) become
error strings that the agent loop turns into error tool responses and counts. A malformed block
reaches the next call (a ``<tool_call>`` followed by a JSON object) or ``<think>``, and takes in
the last ``</tool_call>`` before it, so a broken call never hides the valid call that follows
it, nor exposes a draft call of the reasoning after it. Limits: a call whose JSON is broken
(cut, mis-quoted) and whose broken text holds ``<think>`` may end there; two broken calls in a
row may read as one block (a cut string can end at a quote of the next).

Reference: the Hermes function-calling format (NousResearch/Hermes-Function-Calling) as used by
the Qwen2.5 chat template and verl's ``HermesToolParser``; ``<think>`` blocks as Qwen3 and
DeepSeek-R1 write them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from verl.tools.base import BaseTool, FunctionCall
from verl.utils.reasoning import THINK_END, THINK_START

__all__ = [
    "ParsedToolCall",
    "parse_tool_calls",
    "parse_tool_calls_ordered",
    "render_tool_call",
    "render_tool_response",
    "validate_arguments",
]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_SPACE_RE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


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


def _skip_space(text: str, pos: int) -> int:
    return _SPACE_RE.match(text, pos).end()


def _decode_at(text: str, start: int) -> tuple[Any, int, int]:
    """Decodes the JSON value after the ``<tool_call>`` tag at ``start``: ``(value, body, end)``.

    Raises:
        ValueError: not valid JSON (`json.JSONDecodeError`); RecursionError: nested too deeply.
    """
    body = _skip_space(text, start + len(TOOL_CALL_START))
    obj, end = _DECODER.raw_decode(text, body)
    return obj, body, end


def _starts_call(text: str, start: int) -> bool:
    """Whether the ``<tool_call>`` at ``start`` opens a JSON object, or a JSON value followed by
    ``</tool_call>``: a real call always does, a tag inside a broken JSON string rarely."""
    try:
        obj, _, end = _decode_at(text, start)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) or text.startswith(TOOL_CALL_END, _skip_space(text, end))


def _open_think(text: str, pos: int, limit: int) -> int:
    """The first ``<think>`` in ``[pos, limit)`` with no ``</think>`` after it before ``limit``
    (reasoning still open at ``limit``), or -1."""
    think = text.find(THINK_START, pos, limit)
    while think >= 0 and text.find(THINK_END, think, limit) >= 0:
        think = text.find(THINK_START, think + 1, limit)
    return think


def _malformed_end(text: str, pos: int, plain: bool) -> int:
    """End of a malformed block, searched from ``pos``.

    The block reaches the next ``<tool_call>`` that starts a new call, or a ``<think>`` still open
    there (the new call would be a draft), and takes in the last ``</tool_call>`` before that
    point. ``plain``: the text from ``pos`` on follows a complete JSON value, so it is outside any
    JSON string and its first ``<tool_call>`` and ``<think>`` count. Otherwise the JSON is broken
    and string bounds are unknown: a ``<tool_call>`` counts only if `_starts_call` says so, and a
    ``<think>`` only after the block's first ``</tool_call>``.
    """
    nxt = text.find(TOOL_CALL_START, pos)
    while not plain and nxt >= 0 and not _starts_call(text, nxt):
        nxt = text.find(TOOL_CALL_START, nxt + 1)
    limit = len(text) if nxt < 0 else nxt
    if plain:
        think = text.find(THINK_START, pos, limit)
    else:
        first_close = text.find(TOOL_CALL_END, pos, limit)
        think = _open_think(text, pos if first_close < 0 else first_close, limit)
    limit = limit if think < 0 else think
    close = text.rfind(TOOL_CALL_END, pos, limit)
    return close + len(TOOL_CALL_END) if close >= 0 else limit


def _unclosed(text: str, pos: int, end: int) -> bool:
    return text.find(TOOL_CALL_END, pos, end) < 0


def _scan_block(text: str, start: int, tools: dict[str, BaseTool]) -> tuple[int, ParsedToolCall]:
    """Parses the block whose ``<tool_call>`` tag is at ``start``; returns ``(end, parsed)``."""
    unclosed = ParsedToolCall(error=f"malformed tool call: {TOOL_CALL_START} without {TOOL_CALL_END}")
    try:
        obj, body, json_end = _decode_at(text, start)
    except (ValueError, RecursionError) as e:  # the decoder recurses once per nesting level
        body = _skip_space(text, start + len(TOOL_CALL_START))
        end = _malformed_end(text, body, plain=False)
        if _unclosed(text, body, end):
            return end, unclosed
        why = f"{e.msg} at char {e.pos - body}" if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        return end, ParsedToolCall(error=f"malformed tool call: not valid JSON ({why})")
    after = _skip_space(text, json_end)
    if text.startswith(TOOL_CALL_END, after):
        return after + len(TOOL_CALL_END), _check_call(obj, tools)
    end = _malformed_end(text, json_end, plain=True)
    if _unclosed(text, json_end, end):
        return end, unclosed
    return end, ParsedToolCall(error=f"malformed tool call: text after the JSON value, expected {TOOL_CALL_END}")


def _scan(text: str, tools: dict[str, BaseTool], in_reasoning: bool) -> tuple[str, list[ParsedToolCall]]:
    """One left-to-right pass: reasoning spans are skipped, blocks are parsed and cut out."""
    kept: list[str] = []
    parsed: list[ParsedToolCall] = []
    pos = 0
    if in_reasoning:
        close = text.find(THINK_END)
        pos = len(text) if close < 0 else close + len(THINK_END)
        kept.append(text[:pos])
    while pos < len(text):
        call = text.find(TOOL_CALL_START, pos)
        think = text.find(THINK_START, pos, call if call >= 0 else len(text))
        if think >= 0:  # reasoning first: kept as text, never searched for calls
            close = text.find(THINK_END, think + len(THINK_START))
            end = len(text) if close < 0 else close + len(THINK_END)
            kept.append(text[pos:end])
            pos = end
        elif call >= 0:
            kept.append(text[pos:call])
            pos, one = _scan_block(text, call, tools)
            parsed.append(one)
        else:
            kept.append(text[pos:])
            pos = len(text)
    return "".join(kept), parsed


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
