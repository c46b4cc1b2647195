"""The built-in response fixtures of ``verl reward test``: what a scorer is probed with, per data row.

Every row (a prompt, a ground truth, a data source) yields the same kinds of responses, in three
groups (`FIXTURE_GROUPS`):

* ``trivial`` — what a policy can emit without solving anything: the empty response, whitespace,
  one token repeated, the prompt copied back, and format-only answers (``#### `` with nothing or a
  wrong number, ``\\boxed{}`` / ``\\boxed{wrong}``, ``Answer:`` with nothing, ``{}`` bare and
  fenced, an empty ``<think></think>``). The format-only kinds cover every built-in scorer family
  on every row, so a ``gsm8k`` row also gets ``{}`` (a JSON-schema format reward would show).
* ``answer`` — the right answer in several spellings. A number ``N`` (``72``): ``#### 72``,
  ``#### 72.0``, ``#### 72.``, ``#### $72``, ``#### 7,2`` (thousands commas for ``|N| >= 1000``:
  ``#### 1,000``), ``\\boxed{72}``, ``Answer: 72``. A JSON-schema truth (a dict, or JSON text of
  one, with ``expected``): the expected object compact, indented and in a fenced block. Any other
  text ``t``: ``\\boxed{t}``, ``#### t``, ``Answer: t`` and ``t``.
* ``robustness`` — built on the best-scoring spelling ``C`` (`dependent_fixtures`): ``C`` cut in
  the middle after a line of reasoning, 100,000 characters of filler then ``C``, unicode text
  (accents, CJK, emoji, right-to-left, a zero-width space) then ``C``, ``C`` only inside a
  ``<think>`` block, and ``C`` after one.

Decision: the robustness kinds wrap the spelling the scorer itself rewards most (found by scoring
the ``answer`` group first), not a fixed one, so a ``\\boxed{}`` scorer is probed with
``\\boxed{72}`` in 100k characters and a ``####`` scorer with ``#### 72``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from verl.reward.scorers._numbers import parse_number

__all__ = [
    "FIXTURE_GROUPS",
    "LONG_CHARS",
    "Fixture",
    "answer_fixtures",
    "dependent_fixtures",
    "prompt_text",
    "trivial_fixtures",
]

LONG_CHARS = 100_000
"""Length of the filler of the ``long`` fixture, in characters."""

REPEATS = 4000
"""How many times the ``repeated_tokens`` fixture repeats its token."""

FIXTURE_GROUPS: dict[str, tuple[str, ...]] = {
    "trivial": (
        "empty",
        "whitespace",
        "repeated_tokens",
        "copy_prompt",
        "format_marker_only",
        "format_wrong_number",
        "format_boxed_empty",
        "format_boxed_wrong",
        "format_answer_line_only",
        "format_json_empty",
        "format_json_fenced_empty",
        "format_think_only",
    ),
    "answer": (
        "answer_hash",
        "answer_hash_decimal",
        "answer_hash_trailing_dot",
        "answer_hash_dollar",
        "answer_hash_comma",
        "answer_boxed",
        "answer_line",
        "answer_bare",
        "answer_json",
        "answer_json_indented",
        "answer_json_fenced",
    ),
    "robustness": ("truncated", "long", "unicode", "think_answer_inside", "think_answer_after"),
}
"""Fixture kinds by group, in report order (a row gets the ``answer`` kinds its ground truth allows)."""

GROUP_OF: dict[str, str] = {kind: group for group, kinds in FIXTURE_GROUPS.items() for kind in kinds}


@dataclass(frozen=True)
class Fixture:
    """One probe response.

    Attributes:
        kind: A name of `FIXTURE_GROUPS`, e.g. ``"format_marker_only"``.
        text: The response text given to the scorer as ``solution_str``.
    """

    kind: str
    text: str

    @property
    def group(self) -> str:
        """``trivial``, ``answer`` or ``robustness``."""
        return GROUP_OF[self.kind]


def prompt_text(prompt: Any) -> str:
    """The text a policy that copies its prompt back would write.

    Args:
        prompt: A row's prompt: a string, or chat messages (dicts with ``content``).

    Returns:
        The string, or the contents of the messages joined by newlines ("" for anything else).
    """
    if isinstance(prompt, str):
        return prompt
    try:
        messages = list(prompt)
    except TypeError:
        return ""
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict) and m.get("content"))


def _number(ground_truth: Any) -> Decimal | None:
    return parse_number(str(ground_truth)) if isinstance(ground_truth, (str, int, float)) else None


def _json_expected(ground_truth: Any) -> tuple[bool, Any]:
    """``(True, expected)`` for a JSON-schema truth with ``expected``; ``(is_schema_truth, None)`` otherwise."""
    truth = ground_truth
    if isinstance(truth, str) and truth.lstrip().startswith("{"):
        try:
            truth = json.loads(truth)
        except json.JSONDecodeError:
            return False, None
    if isinstance(truth, dict) and "schema" in truth:
        return ("expected" in truth), truth.get("expected")
    return False, None


def _wrong(ground_truth: Any) -> str:
    """A number that is not the answer: ``N + 1`` for a numeric truth, else ``0`` (``1`` when the truth is ``0``)."""
    n = _number(ground_truth)
    if n is not None:
        return _plain(n + 1)
    return "1" if str(ground_truth).strip() == "0" else "0"


def _plain(n: Decimal) -> str:
    """``Decimal`` as written in an answer: ``72``, ``-3``, ``0.5`` (no exponent, no trailing zeros)."""
    text = format(n.normalize(), "f")
    return text if "." not in text else text.rstrip("0").rstrip(".") or "0"


def _with_commas(n: Decimal) -> str:
    """Thousands commas for ``|n| >= 1000`` (``1,000``); else a comma after the first digit (``7,2``)."""
    text = _plain(n)
    if abs(n) >= 1000:
        whole, dot, frac = text.partition(".")
        return f"{int(whole):,}" + dot + frac
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    return sign + digits[0] + "," + digits[1:] if len(digits) >= 2 and digits.isdigit() else text


def trivial_fixtures(prompt: str, ground_truth: Any) -> list[Fixture]:
    """The ``trivial`` kinds for one row (module docstring).

    Args:
        prompt: The prompt text (`prompt_text`), for ``copy_prompt``.
        ground_truth: The row's ground truth, for the wrong number of ``format_wrong_number``.

    Returns:
        One `Fixture` per ``trivial`` kind, in `FIXTURE_GROUPS` order.
    """
    wrong = _wrong(ground_truth)
    texts = {
        "empty": "",
        "whitespace": " \n\t  \n",
        "repeated_tokens": "the " * REPEATS,
        "copy_prompt": prompt,
        "format_marker_only": "#### ",
        "format_wrong_number": f"#### {wrong}",
        "format_boxed_empty": "\\boxed{}",
        "format_boxed_wrong": f"\\boxed{{{wrong}}}",
        "format_answer_line_only": "Answer: ",
        "format_json_empty": "{}",
        "format_json_fenced_empty": "```json\n{}\n```",
        "format_think_only": "<think></think>",
    }
    return [Fixture(kind, texts[kind]) for kind in FIXTURE_GROUPS["trivial"]]


def answer_fixtures(ground_truth: Any) -> list[Fixture]:
    """The right answer of one row in the spellings its ground truth allows (module docstring).

    Args:
        ground_truth: A number (``"72"``, ``"1,000"``), a JSON-schema truth, or other text.

    Returns:
        The ``answer`` fixtures, best-known spelling first; empty for a JSON-schema truth without
        ``expected`` (the right answer is unknown).
    """
    is_json, expected = _json_expected(ground_truth)
    if is_json:
        return [
            Fixture("answer_json", json.dumps(expected, ensure_ascii=False)),
            Fixture("answer_json_indented", json.dumps(expected, ensure_ascii=False, indent=2)),
            Fixture(
                "answer_json_fenced",
                "Here is the object:\n```json\n" + json.dumps(expected, ensure_ascii=False) + "\n```",
            ),
        ]
    if isinstance(ground_truth, dict):
        return []
    n = _number(ground_truth)
    if n is not None:
        v = _plain(n)
        integer = "." not in v
        out = [Fixture("answer_hash", f"#### {v}")]
        if integer:
            out += [Fixture("answer_hash_decimal", f"#### {v}.0"), Fixture("answer_hash_trailing_dot", f"#### {v}.")]
        out += [Fixture("answer_hash_dollar", f"#### ${v}")]
        if _with_commas(n) != v:
            out.append(Fixture("answer_hash_comma", f"#### {_with_commas(n)}"))
        return out + [Fixture("answer_boxed", f"\\boxed{{{v}}}"), Fixture("answer_line", f"Answer: {v}")]
    t = str(ground_truth).strip()
    return [
        Fixture("answer_boxed", f"\\boxed{{{t}}}"),
        Fixture("answer_hash", f"#### {t}"),
        Fixture("answer_line", f"Answer: {t}"),
        Fixture("answer_bare", t),
    ]


_FILLER = "Let me restate the problem and check every step once more before answering. "
_UNICODE = "Réponse — 答案は次の通り ✓ 🙂 \u200b עברית Ωμέγα naïve café\n"


def dependent_fixtures(answer: str) -> list[Fixture]:
    """The ``robustness`` kinds, built on the best-scoring spelling of the right answer.

    Args:
        answer: That spelling, e.g. ``"#### 72"``.

    Returns:
        One `Fixture` per ``robustness`` kind: ``truncated`` (a line of reasoning, then the first
        half of ``answer``), ``long`` (`LONG_CHARS` characters of filler, then ``answer``),
        ``unicode``, ``think_answer_inside`` (``answer`` only inside ``<think>``) and
        ``think_answer_after``.
    """
    filler = (_FILLER * (LONG_CHARS // len(_FILLER) + 1))[:LONG_CHARS]
    return [
        Fixture("truncated", "Let me work this out step by step.\n" + answer[: len(answer) // 2]),
        Fixture("long", filler + "\n" + answer),
        Fixture("unicode", _UNICODE + answer),
        Fixture("think_answer_inside", f"<think>{answer}</think>\nI am not sure."),
        Fixture("think_answer_after", f"<think>Let me think about it.</think>\n{answer}"),
    ]
