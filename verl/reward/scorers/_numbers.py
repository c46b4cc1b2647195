"""Exact parsing of plain decimal numbers shared by the rule-based scorers.

Numbers are compared as :class:`decimal.Decimal` so that "42.0" == "42", "033" == "33" and
"1,000" == "1000" hold exactly (no float rounding), while "0.5" != "5" and "100" != "1".
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# Thousands separators must group exactly three digits: "1,000" is one number, "1,2" is not.
NUMBER_PATTERN = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+"
_NUMBER_RE = re.compile(NUMBER_PATTERN)
_FULL_NUMBER_RE = re.compile(rf"(?:{NUMBER_PATTERN})")


def parse_number(text: str) -> Decimal | None:
    """Parses a whole string as one plain decimal number.

    Accepts an optional sign, a leading ``$``, thousands commas, leading zeros, a fractional
    part and one trailing period (sentence end), e.g. ``"$1,000"``, ``"033"``, ``"-2.50"``,
    ``"18."``.

    Args:
        text: Candidate answer string.

    Returns:
        The exact value, or None when ``text`` is not a plain number (``"1/2"``, ``"x=3"``).
    """
    s = text.strip().replace("$", "")
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    if not s or _FULL_NUMBER_RE.fullmatch(s) is None:
        return None
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def find_numbers(text: str) -> list[str]:
    """Returns every number-like token of ``text`` in order of appearance.

    Args:
        text: Free text, e.g. a model response.

    Returns:
        The matched substrings (with their commas), e.g. ``["2", "40", "42"]`` for "2+40=42".
    """
    return _NUMBER_RE.findall(text)


def numbers_equal(a: str, b: str) -> bool:
    """True when both strings are plain numbers with the same exact value.

    Args:
        a: First candidate, e.g. ``"033"``.
        b: Second candidate, e.g. ``"33"``.

    Returns:
        ``parse_number(a) == parse_number(b)`` when both parse, else False.
    """
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and x == y
