"""Every built-in scorer reads the answer outside ``<think>...</think>``, never the draft inside it."""

from __future__ import annotations

import json

import pytest

from verl.reward.scorers import default_compute_score

_JSON_TRUTH = json.dumps({"schema": {"type": "object", "required": ["x"]}, "expected": {"x": 2}})

# data_source, ground truth, a right answer, a wrong answer (each as the model would write it)
CASES = [
    ("openai/gsm8k", "7", "#### 7", "#### 8"),
    ("lighteval/MATH", "\\frac{1}{2}", "\\boxed{\\frac{1}{2}}", "\\boxed{3}"),
    ("math_dapo", "34", "Answer: 34", "Answer: 35"),
    ("builtin/arithmetic", "95", "37+58=95", "37+58=96"),
    ("builtin/calculator", "95", "A: 95", "A: 96"),
    ("json_schema", _JSON_TRUTH, '{"x": 2}', '{"x": 3}'),
]


def _score(source: str, truth: str, text: str) -> float:
    out = default_compute_score(source, text, truth)
    return float(out["score"] if isinstance(out, dict) else out)


@pytest.mark.parametrize("source, truth, right, wrong", CASES, ids=[c[0] for c in CASES])
def test_answer_after_think_scores_and_draft_inside_does_not(source, truth, right, wrong):
    full = _score(source, truth, right)
    assert full > _score(source, truth, wrong)
    # the draft inside the reasoning is right, the answer after it wrong: the answer decides
    assert _score(source, truth, f"<think>{right}</think>\n{wrong}") == _score(source, truth, wrong)
    # the draft is wrong, the answer after it right (the JSON answer is the bare text after </think>)
    assert _score(source, truth, f"<think>\n{wrong}\n</think>\n\n{right}") == full
    # the chat template opened the block in the prompt
    assert _score(source, truth, f"{wrong}\n</think>\n{right}") == full
    # cut at the length limit inside the reasoning: no answer at all, the draft earns nothing
    assert _score(source, truth, f"<think>{right}") == _score(source, truth, "")
