r"""GSM8K scorer: the final numeric answer after ``#### `` (strict) or the last number (flexible).

GSM8K reference solutions end with a line ``#### N``; a policy prompted in the same style is
expected to reproduce it. Answers are compared as exact numbers, so ``"42.0"``, ``"$42"`` and
``"42"`` are equal and ``"1,000"`` equals ``"1000"``; a LaTeX thousands separator
(``9{,}500``, ``9\,500``) is part of the number. A ground truth that is not a number is a data
error (ValueError, counted by the reward manager as a reward error), never a silent 0.

Reasoning is removed first (:func:`verl.utils.reasoning.strip_reasoning`): a ``#### N`` inside
``<think>...</think>`` is a draft, not the answer. The rest of the response is always searched (a scorer
that only looked at the last N characters would drop a correct ``#### 42`` followed by a long tail).

Reference: Cobbe et al., "Training Verifiers to Solve Math Word Problems", 2021
(https://arxiv.org/abs/2110.14168); the strict/flexible modes follow verl's ``gsm8k.py``.
"""

from __future__ import annotations

import re
from typing import Literal

from verl.reward.scorers._numbers import NUMBER_PATTERN, find_numbers, parse_number
from verl.utils.reasoning import strip_reasoning

# "#### $1,000" or "####-3": optional spaces and dollar sign between the marker and the number.
_MARKER = "####"
_AFTER_MARKER_RE = re.compile(rf"\s*\$?\s*({NUMBER_PATTERN})")
# LaTeX thousands separators "9{,}500" and "9\,500" -> "9,500" (only before exactly 3 digits)
_LATEX_THOUSANDS_RE = re.compile(r"(\d)(?:\{,\}|\\,)(?=\d{3}(?!\d))")


def normalize_separators(text: str) -> str:
    """``"9{,}500"`` / ``"9\\,500"`` -> ``"9,500"``; other text unchanged."""
    return _LATEX_THOUSANDS_RE.sub(r"\1,", text)


def extract_answer(solution_str: str, method: Literal["strict", "flexible"] = "strict") -> str | None:
    """Extracts the final answer string of a GSM8K-style response.

    Reasoning blocks are removed first (:func:`~verl.utils.reasoning.strip_reasoning`).

    Args:
        solution_str: Decoded response text (never the prompt).
        method: ``"strict"`` takes the number right after the LAST ``####`` marker (None when
            there is no marker or no number after it); ``"flexible"`` takes the last number
            anywhere in the text.

    Returns:
        The answer with commas and ``$`` removed (e.g. ``"1000"``), or None.

    Raises:
        ValueError: If ``method`` is not ``"strict"`` or ``"flexible"``.
    """
    solution_str = normalize_separators(strip_reasoning(solution_str))
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


def compute_score_with_pred(
    solution_str: str,
    ground_truth: str,
    method: Literal["strict", "flexible"] = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **kwargs: object,
) -> dict[str, object]:
    """The GSM8K reward with the extracted answer: ``{"score", "acc", "pred"}``.

    ``score`` if the extracted answer equals the ground truth numerically, ``format_score`` if
    an answer was extracted but is wrong, 0.0 if none was found; ``pred`` is the answer ("" when
    none) so that validation can take majority votes on answers.

    Args:
        solution_str: Decoded response text.
        ground_truth: Reference answer, e.g. ``"18"``, ``"70,000"`` or ``"9{,}500"``.
        method: ``"strict"`` or ``"flexible"``, see :func:`extract_answer`.
        format_score: Reward for a parsed but wrong answer.
        score: Reward for a correct answer.
        **kwargs: Ignored (e.g. ``extra_info``), for a uniform scorer signature.

    Raises:
        ValueError: ``ground_truth`` is not a number (a data error, not a wrong answer).
    """
    expected = parse_number(normalize_separators(str(ground_truth)))
    if expected is None:
        raise ValueError(f"gsm8k: ground truth {ground_truth!r} is not a number")
    answer = extract_answer(solution_str, method=method)
    got = parse_number(answer) if answer is not None else None
    correct = got is not None and got == expected
    value = score if correct else (format_score if answer is not None else 0.0)
    return {"score": value, "acc": bool(correct), "pred": answer or ""}


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: Literal["strict", "flexible"] = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **kwargs: object,
) -> float:
    """verl's ``gsm8k.compute_score``: the reward of :func:`compute_score_with_pred` as a float.

    Raises:
        ValueError: ``ground_truth`` is not a number.
    """
    out = compute_score_with_pred(solution_str, ground_truth, method, format_score, score)
    return float(out["score"])  # type: ignore[arg-type]
