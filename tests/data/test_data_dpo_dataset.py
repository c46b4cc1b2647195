"""Preference pairs: one shared prompt after truncation; pairs without signal are refused."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from verl.data.dpo_dataset import PreferenceDataset, truncate_pair
from verl.utils.errors import DataError


@pytest.fixture(scope="module")
def char_tok():
    from verl.modules.builtin import build_tokenizer

    return build_tokenizer()


def cfg(**kw):
    base = dict(prompt_key="prompt", chosen_key="chosen", rejected_key="rejected", max_length=256, truncation="error")
    base.update(kw)
    return SimpleNamespace(**base)


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def prompt_of(item: dict, side: str) -> list[int]:
    ids, mask = item[f"{side}_input_ids"].tolist(), item[f"{side}_loss_mask"].tolist()
    return ids[: mask.index(1)] if 1 in mask else ids


def test_left_truncation_keeps_one_prompt_for_both_sides(tmp_path, char_tok) -> None:
    row = {"prompt": "123456789+987654321", "chosen": "1111111110", "rejected": "1"}
    full = PreferenceDataset([write(tmp_path / "a.jsonl", [row])], char_tok, cfg())[0]
    n_chosen = len(full["chosen_input_ids"])
    ds = PreferenceDataset(
        [write(tmp_path / "b.jsonl", [row])], char_tok, cfg(max_length=n_chosen - 4, truncation="left")
    )
    item = ds[0]
    assert len(item["chosen_input_ids"]) == n_chosen - 4
    # the same leading prompt tokens are dropped on both sides; each response is intact
    assert prompt_of(item, "chosen") == prompt_of(item, "rejected") == prompt_of(full, "chosen")[4:]
    for side in ("chosen", "rejected"):
        ids, mask = item[f"{side}_input_ids"], item[f"{side}_loss_mask"].bool()
        assert char_tok.decode(ids[mask]) == row[side] + "</s>"


def test_truncate_pair_rules() -> None:
    p, a, b = [1, 2, 3, 4], [5, 6, 7], [8]
    assert truncate_pair(p, [a, b], 5, "left", "r") == ([3, 4], [[5, 6, 7], [8]])
    assert truncate_pair(p, [a, b], 5, "right", "r") == ([1, 2, 3, 4], [[5], [8]])
    assert truncate_pair(p, [a, b], 2, "left", "r") == ([], [[5, 6], [8]])
    assert truncate_pair(p, [a, b], 7, "error", "r") == (p, [a, b])
    with pytest.raises(DataError, match="r: 7 tokens > data.max_length=6"):
        truncate_pair(p, [a, b], 6, "error", "r")


def test_identical_pair_is_refused_with_file_and_row(tmp_path, char_tok) -> None:
    rows = [{"prompt": "1+2", "chosen": "3", "rejected": "4"}, {"prompt": "2+2", "chosen": "4", "rejected": "4"}]
    f = write(tmp_path / "pairs.jsonl", rows)
    with pytest.raises(DataError, match=r"pairs\.jsonl: row 1 \(line 2\): chosen and rejected are the same"):
        PreferenceDataset([f], char_tok, cfg())


def test_pair_identical_after_truncation_is_refused(tmp_path, char_tok) -> None:
    # the answers differ only after the cut: what trains is identical
    f = write(tmp_path / "pairs.jsonl", [{"prompt": "1+2", "chosen": "333", "rejected": "334"}])
    n = len(PreferenceDataset([f], char_tok, cfg())[0]["chosen_input_ids"])
    with pytest.raises(DataError, match="row 0.*same 1 response tokens"):
        PreferenceDataset([f], char_tok, cfg(max_length=n - 3, truncation="right"))


def test_pair_without_response_tokens_is_refused(tmp_path, char_tok) -> None:
    f = write(tmp_path / "pairs.jsonl", [{"prompt": "123456789+987654321", "chosen": "3", "rejected": "4"}])
    with pytest.raises(DataError, match=r"pairs\.jsonl: row 0.*chosen answer has no token left"):
        PreferenceDataset([f], char_tok, cfg(max_length=8, truncation="right"))


def test_missing_column_names_file_row_and_key(tmp_path, char_tok) -> None:
    f = write(
        tmp_path / "pairs.jsonl", [{"prompt": "1+2", "chosen": "3", "rejected": "4"}, {"prompt": "1", "chosen": "2"}]
    )
    with pytest.raises(
        DataError, match=r"pairs\.jsonl: row 1 \(line 2\): missing column\(s\) 'rejected' \(data\.rejected_key\)"
    ):
        PreferenceDataset([f], char_tok, cfg())


def test_sides_with_different_context_before_the_answer_are_refused(tmp_path, char_tok) -> None:
    rejected = [
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "sure?"},
        {"role": "assistant", "content": "4"},
    ]
    f = write(
        tmp_path / "pairs.jsonl",
        [
            {
                "prompt": [{"role": "user", "content": "1+2"}],
                "chosen": [{"role": "assistant", "content": "3"}],
                "rejected": rejected,
            }
        ],
    )
    with pytest.raises(DataError, match=r"pairs\.jsonl: row 0 \(line 1\): chosen and rejected render different tokens"):
        PreferenceDataset([f], char_tok, cfg())
