"""MATH-style scorer: the last ``\\boxed{...}`` answer, checked for mathematical equivalence.

Pipeline (each step short-circuits the next):

0. Reasoning is removed (:func:`verl.utils.reasoning.strip_reasoning`): a box inside
   ``<think>...</think>`` is a draft, never the answer.
1. Extraction: the LAST ``\\boxed{...}`` or ``\\fbox{...}`` with a balanced brace scan, so nested
   answers like ``\\boxed{\\frac{1}{2}}`` are kept whole. An unbalanced last box yields no
   answer (score 0.0, never an exception).
2. Normalised string equality (spacing, ``\\left``/``\\right``, ``\\dfrac``, ``\\text{}``, units of
   degrees, ``$``, ``%``, ``x =`` prefixes...). Braces are kept, so ``\\frac{1}{23}`` and
   ``\\frac{12}{3}`` stay distinct.
3. Exact numeric equality when both sides are plain decimals: ``"033" == "33"`` and
   ``"0" == "00"`` but ``"0.5" != "5"`` and ``"100" != "1"``. When both are plain numbers
   this decides the answer without calling math-verify (fast path).
4. Symbolic equivalence with math-verify (``parse``/``verify``), with its signal-based timeouts
   disabled (``parsing_timeout=None``, ``timeout_seconds=None``) because signals only work on the
   main thread and reward managers call scorers from a worker thread that enforces its own
   timeout. Any math-verify exception counts as "not equivalent".

Reference: Hendrycks et al., "Measuring Mathematical Problem Solving With the MATH Dataset",
2021 (https://arxiv.org/abs/2103.03874) for the answer format; math-verify
(https://github.com/huggingface/Math-Verify) for step 4.
"""

from __future__ import annotations

import re

from verl.reward.scorers._numbers import numbers_equal, parse_number
from verl.utils.reasoning import strip_reasoning

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_UNWRAP_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_FRAC_SHORT_RE = re.compile(r"\\frac(\d)(\d)")
_FRAC_HALF_SHORT_RE = re.compile(r"\\frac(\{[^{}]*\})(\d)|\\frac(\d)(\{[^{}]*\})")
_SQRT_SHORT_RE = re.compile(r"\\sqrt(\w)")
_SLASH_FRAC_RE = re.compile(r"^(-?\d+)/(\d+)$")
_LHS_RE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?=(?!=)")
_REMOVE = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "^{\\circ}",
    "^\\circ",
    "\\$",
    "$",
    "\\%",
    "%",
    "\\displaystyle",
)


def last_boxed_answer(text: str) -> str | None:
    """Returns the content of the last ``\\boxed{}`` / ``\\fbox{}`` in ``text``.

    Braces are matched with a depth counter (escaped ``\\{``/``\\}`` do not count), so nested
    groups survive. ``\\boxed 5`` (no braces) returns the following token.

    Args:
        text: Response text.

    Returns:
        The inner string, or None if there is no box or the last box is unbalanced.
    """
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len(command)
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        token = re.match(r"[^\s$]+", text[i:]) if i > start + len(command) else None
        return token.group(0) if token else None
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\" and j + 1 < len(text) and text[j + 1] in "{}":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


def normalize_answer(answer: str) -> str:
    """Canonical string form of a MATH answer for exact comparison.

    Removes presentation-only LaTeX (spacing commands, ``\\left``/``\\right``, degree marks,
    dollar and percent signs, ``\\text{}`` wrappers), unifies ``\\dfrac``/``\\tfrac`` to
    ``\\frac``, completes ``\\frac12`` to ``\\frac{1}{2}`` and ``a/b`` to ``\\frac{a}{b}``, drops
    a short ``x =`` prefix and a trailing period, then removes all whitespace. Braces are kept.

    Args:
        answer: Raw answer string, e.g. ``"\\dfrac{1}{2}"`` or ``"x = 5"``.

    Returns:
        The normalised string, e.g. ``"\\frac{1}{2}"`` or ``"5"``.
    """
    s = answer.strip().replace("\n", " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for token in _REMOVE:
        s = s.replace(token, "")
    prev = None
    while prev != s:  # unwrap nested \text{...} from the inside out
        prev, s = s, _UNWRAP_RE.sub(r"\1", s)
    s = re.sub(r"\s+", "", s)
    s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORT_RE.sub(lambda m: _complete_frac(m.groups()), s)
    s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
    s = _LHS_RE.sub("", s)
    s = _SLASH_FRAC_RE.sub(r"\\frac{\1}{\2}", s)
    s = s.rstrip(".")
    if s.startswith("."):
        s = "0" + s
    return s


def _complete_frac(groups: tuple[str | None, ...]) -> str:
    """Adds braces to the one bare digit of ``\\frac{a}2`` or ``\\frac2{b}``."""
    num_braced, den_digit, num_digit, den_braced = groups
    if num_braced is not None:
        return f"\\frac{num_braced}{{{den_digit}}}"
    return f"\\frac{{{num_digit}}}{den_braced}"


def _math_verify_equal(prediction: str, gold: str) -> bool:
    """Symbolic equivalence via math-verify; any failure counts as "not equal"."""
    try:
        from math_verify import parse, verify

        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        pred_parsed = parse(f"\\boxed{{{prediction}}}", parsing_timeout=None)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))
    except Exception:  # math-verify/sympy can raise on odd LaTeX: a wrong answer, not a crash
        return False


def is_equiv(prediction: str, gold: str) -> bool:
    """Whether two MATH answers are equivalent (string, then numeric, then symbolic).

    Args:
        prediction: Extracted model answer (box content).
        gold: Reference answer.

    Returns:
        True if equivalent.
    """
    pred_n, gold_n = normalize_answer(prediction), normalize_answer(gold)
    if pred_n == gold_n:
        return bool(pred_n)
    if parse_number(pred_n) is not None and parse_number(gold_n) is not None:
        return numbers_equal(pred_n, gold_n)
    return _math_verify_equal(prediction, gold)


def compute_score(
    solution_str: str,
    ground_truth: str,
    format_score: float = 0.0,
    score: float = 1.0,
    **kwargs: object,
) -> float:
    """Scores a response whose final answer is in ``\\boxed{}`` against the reference.

    ``score`` if the last box outside reasoning is equivalent to ``ground_truth``; ``format_score`` (a format
    bonus, default 0) if a box is present but wrong; 0.0 without a box. The bonus only ever
    looks at ``solution_str``, which the reward manager decodes from response tokens only.

    Args:
        solution_str: Decoded response text.
        ground_truth: Reference answer, e.g. ``"\\frac{1}{2}"``.
        format_score: Reward for a boxed but wrong answer.
        score: Reward for a correct answer.
        **kwargs: Ignored (e.g. ``extra_info``), for a uniform scorer signature.

    Returns:
        The reward.
    """
    answer = last_boxed_answer(strip_reasoning(solution_str))
    if answer is None:
        return 0.0
    return score if is_equiv(answer, str(ground_truth)) else format_score


def compute_score_with_pred(
    solution_str: str, ground_truth: str, format_score: float = 0.0, score: float = 1.0, **kwargs: object
) -> dict[str, object]:
    """:func:`compute_score` with ``acc`` and the extracted ``pred`` (the last box, "" when none).

    Raises:
        ValueError: An empty ground truth (a data error, counted as a reward error).
    """
    if not str(ground_truth).strip():
        raise ValueError("math: the ground truth is empty")
    answer = last_boxed_answer(strip_reasoning(solution_str))
    correct = answer is not None and is_equiv(answer, str(ground_truth))
    value = score if correct else (format_score if answer is not None else 0.0)
    return {"score": value, "acc": bool(correct), "pred": normalize_answer(answer) if answer is not None else ""}
