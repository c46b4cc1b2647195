"""DAPO math scorer: the answer after the last ``Answer:``, +1 when right and -1 otherwise.

DAPO's prompts (Yu et al. 2025, arXiv 2503.14476, the DAPO-Math-17k data) end with "The last
line of your response should be of the form Answer: $Answer". The reward is the binary
correctness of that line mapped to {+1, -1} (a missing or wrong answer is -1); the scorer
reports ``acc`` (bool) and ``pred`` (the extracted answer, "[INVALID]" when none) so that
validation can take majority votes on answers. Reasoning is removed first
(:func:`verl.utils.reasoning.strip_reasoning`: an ``Answer:`` line inside ``<think>...</think>``
is a draft); then only the last 300 characters are searched, as in verl's ``math_dapo`` (the
answer line is the last line by instruction).

Answers are normalised before comparison (``$``, ``\\boxed{}``, ``\\text{}``, units and words
such as "degrees", spaces, a trailing period, thousands commas), then compared as strings, and
as exact decimals when both are plain numbers; a ``\\boxed{}`` answer in strict mode is
required with ``strict_box_verify=True``.
"""

from __future__ import annotations

import re
from typing import Any

from verl.reward.scorers._numbers import numbers_equal, parse_number
from verl.reward.scorers.math_answer import last_boxed_answer
from verl.utils.reasoning import strip_reasoning

__all__ = ["compute_score", "extract_answer", "normalize_final_answer"]

TAIL_CHARS = 300
INVALID = "[INVALID]"
_ANSWER_RE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
_UNITS = (
    "degrees",
    "degree",
    "cm",
    "centimeters",
    "meters",
    "units",
    "square",
    "inches",
    "feet",
    "dollars",
    "mph",
    "km",
)
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_THOUSANDS_RE = re.compile(r"(\d)(?:\{,\}|\\,|,)(?=\d{3}(?!\d))")


def normalize_final_answer(answer: str) -> str:
    """Canonical form of a final answer string (see module docstring)."""
    s = answer.strip()
    boxed = last_boxed_answer(s)
    if boxed is not None:
        s = boxed
    s = _TEXT_RE.sub(r"\1", s)
    s = s.replace("$", "").replace("\\%", "").replace("%", "").replace("\\!", "")
    s = _THOUSANDS_RE.sub(r"\1", s)
    for unit in _UNITS:
        s = re.sub(rf"(?i)\s*\b{unit}\b", "", s)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2]
    return s


def extract_answer(solution_str: str, strict_box_verify: bool = False) -> str | None:
    """The normalised answer of the last ``Answer:`` line (or last ``\\boxed{}`` when strict), outside reasoning."""
    tail = strip_reasoning(solution_str)[-TAIL_CHARS:]
    if strict_box_verify:
        boxed = last_boxed_answer(tail)
        return None if boxed is None else normalize_final_answer(boxed)
    matches = _ANSWER_RE.findall(tail)
    return normalize_final_answer(matches[-1]) if matches else None


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, **kwargs: Any
) -> dict[str, Any]:
    """Scores a DAPO-format response.

    Args:
        solution_str: Decoded response text (never the prompt).
        ground_truth: Reference answer, e.g. ``"34"`` or ``"\\frac{1}{2}"``.
        strict_box_verify: Require the answer in ``\\boxed{}`` instead of an ``Answer:`` line.
        **kwargs: Ignored (``extra_info``, ...).

    Returns:
        ``{"score": 1.0 | -1.0, "acc": bool, "pred": str}``.

    Raises:
        ValueError: An empty ground truth (a data error, counted as a reward error).
    """
    gold = normalize_final_answer(str(ground_truth))
    if not gold:
        raise ValueError(f"math_dapo: ground truth {ground_truth!r} is empty after normalisation")
    pred = extract_answer(solution_str, strict_box_verify)
    correct = pred is not None and (pred == gold or (parse_number(pred) is not None and numbers_equal(pred, gold)))
    return {"score": 1.0 if correct else -1.0, "acc": bool(correct), "pred": pred if pred is not None else INVALID}
