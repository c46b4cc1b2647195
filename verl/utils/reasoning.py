"""Separating a response's reasoning (``<think>...</think>``) from its answer.

Reasoning models (DeepSeek-R1, Qwen3, QwQ) write a draft inside ``<think>...</think>`` and the
answer after it. Anything that reads the answer (reward scorers, answer extraction) must read
the answer only: a draft JSON object or ``#### 42`` inside the reasoning is not an answer.

Rules of :func:`strip_reasoning` (the same as vLLM's ``deepseek_r1`` reasoning parser where
they overlap):

* every closed ``<think>...</think>`` block is removed (blocks may repeat, as in multi-turn
  trajectories that think before each tool call);
* a ``</think>`` that closes no block removes all the text before it: chat templates such as
  DeepSeek-R1's and Qwen3's thinking mode end the *prompt* with ``<think>\\n``, so the response
  holds only ``reasoning</think>answer``;
* an unclosed ``<think>`` removes everything after it: a response cut at the length limit
  inside its reasoning has no answer (it scores as a missing answer, never on its draft).

Tags are matched exactly (case-sensitive), as the tokenizers emit them. The result holds
neither tag, so stripping twice changes nothing.
"""

from __future__ import annotations

__all__ = ["THINK_END", "THINK_START", "strip_reasoning"]

THINK_START = "<think>"
THINK_END = "</think>"


def strip_reasoning(text: str, start: str = THINK_START, end: str = THINK_END) -> str:
    """Returns ``text`` without its reasoning blocks (rules in the module docstring).

    Args:
        text: Decoded response text.
        start: Opening tag of a reasoning block.
        end: Closing tag of a reasoning block.

    Returns:
        The answer text: the non-empty pieces outside reasoning in order, joined by one space
        (so ``"4<think>...</think>2"`` never reads as ``42``). Unchanged when ``text`` holds
        neither tag.

    Examples:
        ``"<think>{\\"a\\": 1}</think>{\\"a\\": 2}"`` -> ``'{"a": 2}'``;
        ``"draft</think> #### 7"`` -> ``" #### 7"``; ``"<think>#### 7"`` -> ``""``.
    """
    pieces: list[str] = []
    pos = 0
    while True:
        open_at, close_at = text.find(start, pos), text.find(end, pos)
        if close_at >= 0 and (open_at < 0 or close_at < open_at):
            pieces = []  # an end with no start: everything before it was reasoning
            pos = close_at + len(end)
            continue
        if open_at < 0:
            pieces.append(text[pos:])
            return _join(pieces)
        pieces.append(text[pos:open_at])
        close_at = text.find(end, open_at + len(start))
        if close_at < 0:
            return _join(pieces)  # unclosed: the rest is reasoning
        pos = close_at + len(end)


def _join(pieces: list[str]) -> str:
    kept = [p for p in pieces if p]
    return " ".join(kept)
