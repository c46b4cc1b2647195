"""GSM8K scorer: the final numeric answer after ``#### `` (strict) or the last number (flexible).

GSM8K reference solutions end with a line ``#### N``; a policy prompted in the same style is
expected to reproduce it. Answers are compared as exact numbers, so ``"42.0"``, ``"$42"`` and
``"42"`` are equal and ``"1,000"`` equals ``"1000"``.

The whole response is always searched (known fault B19: a scorer that only looked at the last N
characters dropped a correct ``#### 42`` followed by a long tail).

Reference: Cobbe et al., "Training Verifiers to Solve Math Word Problems", 2021
(https://arxiv.org/abs/2110.14168); the strict/flexible modes follow verl's ``gsm8k.py``.
"""

from __future__ import annotations

import re
from typing import Literal

from verl.reward.scorers._numbers import NUMBER_PATTERN, find_numbers, parse_number

# "#### $1,000" or "####-3": optional spaces and dollar sign between the marker and the number.
_MARKER = "####"
_AFTER_MARKER_RE = re.compile(rf"\s*\$?\s*({NUMBER_PATTERN})")


def extract_answer(solution_str: str, method: Literal["strict", "flexible"] = "strict") -> str | None:
    """Extracts the final answer string of a GSM8K-style response.

    Args:
        solution_str: Decoded response text (never the prompt, see B21).
        method: ``"strict"`` takes the number right after the LAST ``####`` marker (None when
            there is no marker or no number after it); ``"flexible"`` takes the last number
            anywhere in the text.

    Returns:
        The answer with commas and ``$`` removed (e.g. ``"1000"``), or None.

    Raises:
        ValueError: If ``method`` is not ``"strict"`` or ``"flexible"``.
    """
    if method == "strict":
        pos = solution_str.rfind(_MARKER)
        if pos < 0:
            return None
        match = _AFTER_MARKER_RE.match(solution_str, pos + len(_MARKER))
        answer = match.group(1) if match else None
    elif method == "flexible":
        numbers = find_numbers(solution_str)
        answer = numbers[-1] if numbers else None
    else:
        raise ValueError(f"unknown gsm8k method {method!r}; valid: 'strict', 'flexible'")
    return None if answer is None else answer.replace(",", "").replace("$", "")


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: Literal["strict", "flexible"] = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **kwargs: object,
) -> float:
    """Scores a GSM8K response against the reference answer.

    ``score`` if the extracted answer equals the ground truth numerically, ``format_score`` if
    an answer was extracted but is wrong, 0.0 if none was found.

    Args:
        solution_str: Decoded response text.
        ground_truth: Reference answer, e.g. ``"18"`` or ``"70,000"``.
        method: ``"strict"`` or ``"flexible"``, see :func:`extract_answer`.
        format_score: Reward for a parsed but wrong answer.
        score: Reward for a correct answer.
        **kwargs: Ignored (e.g. ``extra_info``), for a uniform scorer signature.

    Returns:
        The reward, one of ``score``, ``format_score`` or 0.0.
    """
    answer = extract_answer(solution_str, method=method)
    if answer is None:
        return 0.0
    expected = parse_number(str(ground_truth))
    got = parse_number(answer)
    if expected is not None and got is not None:
        return score if got == expected else format_score
    return score if answer.strip() == str(ground_truth).strip() else format_score
