"""Structured-output scorer: a response checked against a JSON Schema, format and fields apart.

The ground truth (``reward_model.ground_truth``) is a dict, or a JSON string of one::

    {"schema": {...JSON Schema...}, "expected": {"name": "Ada", "address": {"city": "London"}}}

Three parts, each in [0, 1], reported as ``reward/json_valid``, ``reward/schema_valid`` and
``reward/fields_correct``:

* ``json_valid``: the answer is JSON — the whole text, else the last fenced block
  (`````json ... ````` or ````` ... `````); the answer is the response without its reasoning
  (:func:`verl.utils.reasoning.strip_reasoning`: a draft inside ``<think>...</think>`` never
  counts, an unclosed ``<think>`` leaves no answer);
* ``schema_valid``: that JSON validates against ``schema`` (the ``jsonschema`` library, the
  draft the schema's ``$schema`` names, else the latest);
* ``fields_correct``: the share of ``expected``'s leaf fields (nested objects are walked; lists
  and scalars are leaves) whose value in the response is equal — numbers by value (``36 ==
  36.0``, booleans are not numbers), strings after stripping spaces. Without ``expected`` it
  equals ``schema_valid``.

``score = json_weight * json_valid + schema_weight * schema_valid + fields_weight *
fields_correct`` (defaults 0.1, 0.2, 0.7, so a perfect answer scores 1.0).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import jsonschema

from verl.utils.reasoning import strip_reasoning

__all__ = ["compute_score", "extract_json", "field_accuracy"]

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)
_MISSING = object()


def extract_json(text: str) -> tuple[bool, Any]:
    """Parses the JSON answer of a response: the whole text, else the last fenced block.

    Reasoning is removed first (:func:`~verl.utils.reasoning.strip_reasoning`), so JSON inside
    ``<think>...</think>`` is never read and a bare JSON answer after ``</think>`` is.

    Returns:
        ``(True, value)`` when parsed, else ``(False, None)``.
    """
    text = strip_reasoning(text)
    candidates = [text.strip()] + [m.group(1).strip() for m in reversed(list(_FENCE_RE.finditer(text)))]
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return True, json.loads(candidate)
        except json.JSONDecodeError:
            continue
    return False, None


def _leaves(expected: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in expected.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            out.extend(_leaves(value, path))
        else:
            out.append((path, value))
    return out


def _lookup(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _equal(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(want, str) and isinstance(got, str):
        return got.strip() == want.strip()
    return got == want


def field_accuracy(value: Any, expected: dict[str, Any]) -> float:
    """Share of ``expected``'s leaf fields equal in ``value`` (see the module docstring); 1.0 if none."""
    leaves = _leaves(expected)
    if not leaves:
        return 1.0
    hits = sum(_equal(got, want) for path, want in leaves if (got := _lookup(value, path)) is not _MISSING)
    return hits / len(leaves)


def _ground_truth(ground_truth: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    if isinstance(ground_truth, str):
        ground_truth = json.loads(ground_truth)
    if not isinstance(ground_truth, dict) or not isinstance(ground_truth.get("schema"), dict):
        raise ValueError('json_schema ground_truth must be {"schema": {...}, "expected": {...}} (dict or JSON string)')
    expected = ground_truth.get("expected")
    if expected is not None and not isinstance(expected, dict):
        raise ValueError("json_schema ground_truth 'expected' must be an object of field values")
    return ground_truth["schema"], expected


def compute_score(
    solution_str: str,
    ground_truth: Any,
    json_weight: float = 0.1,
    schema_weight: float = 0.2,
    fields_weight: float = 0.7,
    **kwargs: Any,
) -> dict[str, float]:
    """Scores a structured-output response.

    Args:
        solution_str: decoded response.
        ground_truth: ``{"schema": ..., "expected": ...}`` as a dict or JSON string.
        json_weight: weight of ``json_valid``.
        schema_weight: weight of ``schema_valid``.
        fields_weight: weight of ``fields_correct``.
        **kwargs: ignored (``extra_info``), for the uniform scorer signature.

    Returns:
        ``{"score", "json_valid", "schema_valid", "fields_correct"}`` (floats).

    Raises:
        ValueError: malformed ground truth (a data error, not a model error).
        jsonschema.SchemaError: the schema itself is invalid.
    """
    schema, expected = _ground_truth(ground_truth)
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    parsed, value = extract_json(solution_str)
    schema_ok = parsed and validator(schema).is_valid(value)
    if not parsed:
        fields = 0.0
    elif expected is None:
        fields = float(schema_ok)
    else:
        fields = field_accuracy(value, expected)
    parts = {"json_valid": float(parsed), "schema_valid": float(schema_ok), "fields_correct": fields}
    score = json_weight * parts["json_valid"] + schema_weight * parts["schema_valid"] + fields_weight * fields
    return {"score": score, **parts}
