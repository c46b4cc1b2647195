"""Structured-output scorer: hand-computed format / schema / field parts and their weighted sum."""

from __future__ import annotations

import json

import jsonschema
import pytest

from verl.reward.scorers import default_compute_score
from verl.reward.scorers.json_schema import compute_score, extract_json, field_accuracy

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "address": {"type": "object"}},
    "required": ["name", "age"],
}
TRUTH = {"schema": SCHEMA, "expected": {"name": "Ada", "age": 36}}


@pytest.mark.parametrize(
    "response, parts, score",
    [
        ('{"name": "Ada", "age": 36}', (1, 1, 1.0), 1.0),
        # fenced, schema-valid, one of two fields right: 0.1 + 0.2 + 0.7 * 0.5
        ('Here:\n```json\n{"name": "Ada", "age": 35}\n```', (1, 1, 0.5), 0.65),
        # age missing: schema fails, name right: 0.1 + 0 + 0.35
        ('{"name": "Ada"}', (1, 0, 0.5), 0.45),
        # age as a string: schema fails, and "36" != 36
        ('{"name": " Ada ", "age": "36"}', (1, 0, 0.5), 0.45),
        # JSON Schema counts 36.0 as an integer, and it equals 36 by value
        ('{"name": "Ada", "age": 36.0}', (1, 1, 1.0), 1.0),
        ("name: Ada, age: 36", (0, 0, 0.0), 0.0),
        ("", (0, 0, 0.0), 0.0),
        ("[1, 2]", (1, 0, 0.0), 0.1),
    ],
)
def test_parts_and_score(response, parts, score):
    out = compute_score(response, json.dumps(TRUTH))
    assert (out["json_valid"], out["schema_valid"], out["fields_correct"]) == parts
    assert out["score"] == pytest.approx(score, abs=1e-12)


def test_nested_fields_and_weights():
    truth = {"schema": {"type": "object"}, "expected": {"a": {"b": 1, "c": [1, 2]}, "d": True}}
    # a.b right, a.c wrong order, d given as 1 (a bool is not a number): 1 of 3
    out = compute_score(
        '{"a": {"b": 1.0, "c": [2, 1]}, "d": 1}', truth, json_weight=0.0, schema_weight=0.5, fields_weight=0.5
    )
    assert out["fields_correct"] == pytest.approx(1 / 3)
    assert out["score"] == pytest.approx(0.5 + 0.5 / 3)


def test_without_expected_fields_follow_schema():
    out = compute_score('{"name": "x", "age": 1}', {"schema": SCHEMA})
    assert (out["schema_valid"], out["fields_correct"], out["score"]) == (1.0, 1.0, pytest.approx(1.0))


def test_last_fenced_block_wins():
    text = '```json\n{"name": "Bob", "age": 1}\n```\nfixed:\n```\n{"name": "Ada", "age": 36}\n```'
    assert extract_json(text) == (True, {"name": "Ada", "age": 36})
    assert field_accuracy({"x": 1}, {}) == 1.0


def test_bad_ground_truth_and_schema_raise():
    with pytest.raises(ValueError, match="ground_truth must be"):
        compute_score("{}", {"expected": {}})
    with pytest.raises(jsonschema.SchemaError):
        compute_score("{}", {"schema": {"type": 5}})


def test_routed_by_data_source_and_reported_as_reward_metrics():
    import torch

    from verl.protocol import DataProto
    from verl.reward import NaiveRewardManager

    class CharTokenizer:
        def batch_decode(self, ids, skip_special_tokens=False):
            return ["".join(chr(i) for i in row if i) for row in ids]

    assert default_compute_score("json_schema", '{"name": "Ada", "age": 35}', json.dumps(TRUTH))[
        "score"
    ] == pytest.approx(0.65)
    responses = ['{"name": "Ada", "age": 36}', '{"name": "Ada"}']
    width = max(map(len, responses))
    ids = torch.tensor([[ord(c) for c in r] + [0] * (width - len(r)) for r in responses])
    mask = (ids != 0).long()
    batch = DataProto.from_dict(
        tensors={
            "prompts": torch.full((2, 1), 65),
            "responses": ids,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(2, 1, dtype=torch.long), mask], dim=1),
        },
        non_tensors={
            "data_source": ["json_schema"] * 2,
            "extra_info": [{}, {}],
            "reward_model": [{"ground_truth": json.dumps(TRUTH), "style": "rule"}] * 2,
        },
    )
    out = NaiveRewardManager(CharTokenizer())(batch)
    info = out["reward_extra_info"]
    assert (
        info["json_valid"] == [1.0, 1.0] and info["schema_valid"] == [1.0, 0.0] and info["fields_correct"] == [1.0, 0.5]
    )
    assert out["reward_tensor"].sum(dim=1).tolist() == pytest.approx([1.0, 0.45])
