"""``trainer.rollout_data_dir``: the token-level dump beside verl's JSONL, checked by hand on a built batch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from verl.config import ConfigError, load_config
from verl.modules.builtin import load_builtin_tokenizer
from verl.protocol import DataProto
from verl.trainer.ppo.dumps import dump_rollout_data, select_dump_rows


def test_select_dump_rows_keeps_whole_groups_in_order():
    uids = ["a", "b", "a", "c", "b"]
    assert select_dump_rows(uids, None).tolist() == [0, 2, 1, 4, 3]
    assert select_dump_rows(uids, 4).tolist() == [0, 2, 1, 4]
    assert select_dump_rows(uids, 3).tolist() == [0, 2]  # group b would overflow: stop there
    assert select_dump_rows(uids, 1).tolist() == [0]  # the first group alone is larger: its first rows


def _batch(tok) -> DataProto:
    """B=4 (groups g0, g1), P=3 left-padded, R=4 right-padded; row 0 has a masked tool turn, row 3 is full."""
    pad = tok.pad_token_id
    prompts = [tok.encode("Q:")[-2:], tok.encode("Q:1")[-3:], tok.encode("Q:")[-2:], tok.encode("Q:2")[-3:]]
    responses = [tok.encode("ab7c"), tok.encode("x"), tok.encode("yz"), tok.encode("1234")]
    P, R = 3, 4
    prompt_t = torch.full((4, P), pad)
    resp_t = torch.full((4, R), pad)
    attn = torch.zeros(4, P + R, dtype=torch.long)
    rmask = torch.zeros(4, R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_t[i, P - len(p) :] = torch.tensor(p)
        attn[i, P - len(p) : P] = 1
        resp_t[i, : len(r)] = torch.tensor(r)
        attn[i, P : P + len(r)] = 1
        rmask[i, : len(r)] = 1
    rmask[0, 2] = 0  # "7" came from the tool: not trained
    lp = -torch.arange(16, dtype=torch.float32).reshape(4, R) / 10
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompt_t,
            "responses": resp_t,
            "attention_mask": attn,
            "response_mask": rmask,
            "old_log_probs": lp,
            "rollout_log_probs": lp + 0.001,
            "advantages": torch.tensor([[1.0] * R, [-1.0] * R, [0.5] * R, [-0.5] * R]),
            "token_level_scores": torch.tensor([[0, 0, 0, 1.0], [0] * R, [0, 1.0, 0, 0], [0] * R]),
        },
        non_tensors={
            "uid": np.array(["g0", "g0", "g1", "g1"], dtype=object),
            "data_source": np.array(["calc"] * 4, dtype=object),
            "acc": np.array([True, False, True, False], dtype=object),
        },
    )
    return batch


def test_dump_rollout_data_writes_tokens_and_fields(tmp_path):
    tok = load_builtin_tokenizer()
    batch = _batch(tok)
    ent = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 100
    jsonl, npz = dump_rollout_data(
        batch, tok, tmp_path, 3, entropys=ent, score_keys=["acc", "missing"], policy_version=2
    )
    assert (jsonl.name, npz.name) == ("3.jsonl", "3.tokens.npz")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["response_length"] for r in rows] == [4, 1, 2, 4] and [r["truncated"] for r in rows] == [
        True,
        False,
        False,
        True,
    ]
    assert [r["prompt_length"] for r in rows] == [2, 3, 2, 3] and [r["acc"] for r in rows] == [True, False, True, False]
    assert (
        rows[0]["output"] == "ab7c"
        and rows[0]["score"] == 1.0
        and rows[0]["policy_version"] == 2
        and "missing" not in rows[0]
    )
    z = np.load(npz)
    assert z["response_offsets"].tolist() == [0, 4, 5, 7, 11] and z["prompt_offsets"].tolist() == [0, 2, 5, 7, 10]
    assert z["response_ids"].tolist() == tok.encode("ab7c") + tok.encode("x") + tok.encode("yz") + tok.encode("1234")
    assert z["response_mask"].tolist() == [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    assert z["response_pad"].tolist() == [0, 3, 2, 0]
    # the float arrays hold the valid positions of each row, in order: row 1 keeps only its first
    np.testing.assert_allclose(z["old_log_probs"][4:7], [-0.4, -0.8, -0.9])
    np.testing.assert_allclose(z["rollout_log_probs"] - z["old_log_probs"], 0.001, atol=1e-6)
    np.testing.assert_allclose(z["entropys"][4:7], [0.04, 0.08, 0.09])
    assert z["advantages"][:5].tolist() == [1.0, 1.0, 1.0, 1.0, -1.0]
    pieces = bytes(z["vocab_bytes"]).decode()
    off = z["vocab_offsets"]
    table = {int(t): pieces[off[j] : off[j + 1]] for j, t in enumerate(z["vocab_ids"])}
    assert "".join(table[t] for t in z["response_ids"][:4]) == "ab7c" and table[tok.encode("Q")[-1]] == "Q"


def test_max_rows_bounds_both_files_by_whole_groups(tmp_path):
    tok = load_builtin_tokenizer()
    ent = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    jsonl, npz = dump_rollout_data(_batch(tok), tok, tmp_path, 1, max_rows=3, entropys=ent)
    assert [json.loads(x)["uid"] for x in jsonl.read_text().splitlines()] == ["g0", "g0"]
    z = np.load(npz)
    assert z["response_offsets"].tolist() == [0, 4, 5]
    np.testing.assert_allclose(z["entropys"], [0, 1, 2, 3, 4])  # entropy rows follow the selection


def test_max_rows_must_be_positive_and_need_a_dump():
    with pytest.raises(ConfigError, match="trainer.rollout_data_max_rows: must be >= 1"):
        load_config("calculator", ["trainer.rollout_data_max_rows=0", "trainer.rollout_data_dir=/tmp/x"])
    with pytest.raises(ConfigError, match="trainer.rollout_data_max_rows: bounds the rollout dump, which is off"):
        load_config("calculator", ["trainer.rollout_data_max_rows=64"])
    cfg = load_config("calculator", ["trainer.rollout_data_max_rows=64", "trainer.rollout_data_dir=/tmp/x"])
    assert cfg.trainer.rollout_data_max_rows == 64
