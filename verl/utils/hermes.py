"""The Hermes tool-call block scanner: where each ``<tool_call>`` block of a turn starts and ends.

Pure text, no tools: `verl.tools.parser` turns the decoded blocks into calls checked against the
tools' schemas, and the reward scorers cut the same blocks out of a response before reading its
answer, so the two can never disagree on where a call ends (a regular expression would end a
call at a ``</tool_call>`` inside one of its JSON strings, and leave the rest as answer text).

After ``<tool_call>`` (and any whitespace) one JSON value is decoded with
``json.JSONDecoder.raw_decode``, so the arguments are arbitrary JSON whose strings may hold any
character, the format's own tags included; after the value (and any whitespace) ``</tool_call>``
is required. Reasoning is skipped: text from ``<think>`` to the next ``</think>`` is never
searched for blocks; an unclosed ``<think>`` makes the rest of the text reasoning. A malformed
block reaches the next block (a ``<tool_call>`` followed by a JSON object) or ``<think>``, and
takes in the last ``</tool_call>`` before it, so a broken call never hides the valid call that
follows it, nor exposes a draft call of the reasoning after it. Limits: a call whose JSON is
broken (cut, mis-quoted) and whose broken text holds ``<think>`` may end there; two broken calls
in a row may read as one block (a cut string can end at a quote of the next).

Reference: the Hermes function-calling format (NousResearch/Hermes-Function-Calling) as used by
the Qwen2.5 chat template; ``<think>`` blocks as Qwen3 and DeepSeek-R1 write them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verl.utils.reasoning import THINK_END, THINK_START

__all__ = ["TOOL_CALL_END", "TOOL_CALL_START", "HermesBlock", "scan_tool_blocks"]

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_SPACE_RE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


@dataclass
class HermesBlock:
    """One ``<tool_call>`` block: its decoded JSON ``value``, or the ``error`` that makes it malformed."""

    value: Any = None
    error: str | None = None


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


def _scan_block(text: str, start: int) -> tuple[int, HermesBlock]:
    """Reads the block whose ``<tool_call>`` tag is at ``start``; returns ``(end, block)``."""
    unclosed = HermesBlock(error=f"malformed tool call: {TOOL_CALL_START} without {TOOL_CALL_END}")
    try:
        obj, body, json_end = _decode_at(text, start)
    except (ValueError, RecursionError) as e:  # the decoder recurses once per nesting level
        body = _skip_space(text, start + len(TOOL_CALL_START))
        end = _malformed_end(text, body, plain=False)
        if _unclosed(text, body, end):
            return end, unclosed
        # json's own message for a control character already ends on "at"
        why = (
            f"{e.msg.removesuffix(' at')} at char {e.pos - body}"
            if isinstance(e, json.JSONDecodeError)
            else "nested too deeply"
        )
        return end, HermesBlock(error=f"malformed tool call: not valid JSON ({why})")
    after = _skip_space(text, json_end)
    if text.startswith(TOOL_CALL_END, after):
        return after + len(TOOL_CALL_END), HermesBlock(value=obj)
    end = _malformed_end(text, json_end, plain=True)
    if _unclosed(text, json_end, end):
        return end, unclosed
    return end, HermesBlock(error=f"malformed tool call: text after the JSON value, expected {TOOL_CALL_END}")


def scan_tool_blocks(text: str, *, in_reasoning: bool = False) -> tuple[str, list[HermesBlock]]:
    """One left-to-right pass over a turn: reasoning spans are skipped, ``<tool_call>`` blocks cut out.

    Args:
        text: decoded assistant turn (or a whole response).
        in_reasoning: the text starts inside a ``<think>`` block the prompt opened: blocks count
            only after the first ``</think>``.

    Returns:
        ``(content, blocks)``: the text without the blocks outside reasoning (reasoning kept
        verbatim), and one `HermesBlock` per such block, in text order. Never raises.
    """
    kept: list[str] = []
    parsed: list[HermesBlock] = []
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
            pos, one = _scan_block(text, call)
            parsed.append(one)
        else:
            kept.append(text[pos:])
            pos = len(text)
    return "".join(kept), parsed
