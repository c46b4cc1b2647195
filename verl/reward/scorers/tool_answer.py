"""Scorer for tool-using answers: the last integer *outside* tool calls and tool responses.

A multi-turn response holds the model's tool calls and the tools' answers too, e.g.
``<tool_call>{"name": "calculator", ...}</tool_call><tool_response>1786</tool_response>A:1786``.
Only the model's own words may earn the reward: every ``<tool_call>...</tool_call>`` block is
cut out by the agent loop's own JSON-aware scanner (`verl.utils.hermes.scan_tool_blocks`, so a
``</tool_call>`` inside a call's JSON string never ends the call and leaves its tail as answer
text), then every ``<tool_response>...</tool_response>`` block (Hermes / Qwen2.5 markup; an
unclosed block runs to the end), then the last integer left must equal ``ground_truth`` (1.0,
else 0.0). So a trajectory that stops right after the tool answered scores 0, not the tool's number.
Reasoning (``<think>...</think>``, :func:`verl.utils.reasoning.strip_reasoning`) is removed
before the tool blocks, so a draft call inside it never swallows the answer after it.
"""

from __future__ import annotations

import re

from verl.reward.scorers.arithmetic import extract_answer
from verl.utils.hermes import TOOL_CALL_START, scan_tool_blocks
from verl.utils.reasoning import strip_reasoning

__all__ = ["compute_score", "strip_tool_blocks"]

_RESPONSE_RE = re.compile(r"<tool_response>.*?(?:</tool_response>|$)", re.DOTALL)


def strip_tool_blocks(text: str) -> str:
    """``text`` without its tool-call and tool-response blocks (unclosed ones run to the end).

    A removed call leaves a space, so the digits on either side of it never join into one number.
    """
    content, _ = scan_tool_blocks(text.replace(TOOL_CALL_START, " " + TOOL_CALL_START))
    return _RESPONSE_RE.sub(" ", content)


def compute_score(solution_str: str, ground_truth: str, **kwargs: object) -> float:
    """1.0 if the last integer outside reasoning and tool blocks equals ``int(ground_truth)``, else 0.0.

    Raises:
        ValueError: ``ground_truth`` is not an integer string (a data bug).
    """
    answer = extract_answer(strip_tool_blocks(strip_reasoning(solution_str)))
    return 1.0 if answer is not None and answer == int(str(ground_truth).strip()) else 0.0
