"""RLHFDataset: validation, chat templating, padding, positions and overlong prompts."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from verl.config.schema import DataConfig
from verl.data import RLHFDataset
from verl.data.rl_dataset import left_pad, truncate_prompt
from verl.utils.torch_functional import position_ids_from_attention_mask


def words(*ids: int) -> str:
    """Text whose toy tokens are ``ids`` (id 1 = "<s>", 2 = "</s>", 20 = "hi", else "w<i>")."""
    names = {1: "<s>", 2: "</s>", 20: "hi"}
    return " ".join(names.get(i, f"w{i}") for i in ids)


TWELVE = words(*range(1, 13))  # tokenizes to [1, 2, ..., 12]


# ------------------------------------------------------------------ B26: overlong prompts
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("left", [5, 6, 7, 8, 9, 10, 11, 12]),
        ("right", [1, 2, 3, 4, 5, 6, 7, 8]),
        ("middle", [1, 2, 3, 4, 9, 10, 11, 12]),
    ],
)
def test_b26_truncate_prompt_exact_values(mode: str, expected: list[int]) -> None:
    """B26: max 8, prompt 1..12."""
    assert truncate_prompt(list(range(1, 13)), 8, mode) == expected


def test_b26_truncate_error_and_short_prompt() -> None:
    with pytest.raises(ValueError, match=r"12 tokens > data.max_prompt_length 8"):
        truncate_prompt(list(range(1, 13)), 8, "error")
    assert truncate_prompt([3, 4], 8, "error") == [3, 4]
    assert truncate_prompt(list(range(1, 10)), 7, "middle") == [1, 2, 3, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="unknown data.truncation"):
        truncate_prompt(list(range(1, 13)), 8, "both")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("left", [5, 6, 7, 8, 9, 10, 11, 12]),
        ("right", [1, 2, 3, 4, 5, 6, 7, 8]),
        ("middle", [1, 2, 3, 4, 9, 10, 11, 12]),
    ],
)
def test_b26_dataset_truncation_modes(toy_tokenizer, rows_file, row, mode: str, expected: list[int]) -> None:
    """B26 through the dataset: the ids sent on (raw_prompt_ids) and the padded tensor agree."""
    path = rows_file([row(TWELVE, 0)])
    ds = RLHFDataset(path, toy_tokenizer(), DataConfig(max_prompt_length=8, truncation=mode))
    sample = ds[0]
    assert sample["raw_prompt_ids"] == expected
    assert sample["input_ids"].tolist() == expected
    assert sample["attention_mask"].tolist() == [1] * 8


def test_b26_error_mode_names_file_row_and_lengths(toy_tokenizer, rows_file, row) -> None:
    path = rows_file([row("w3"), row(TWELVE)], "long.jsonl")
    with pytest.raises(ValueError, match=r"long\.jsonl: row 1 \(line 2\): prompt has 12 tokens > .* 8"):
        RLHFDataset(path, toy_tokenizer(), DataConfig(max_prompt_length=8, truncation="error"))


def test_b26_filter_overlong_prompts(toy_tokenizer, rows_file, row) -> None:
    """B26: 5 prompts, one too long, filter_overlong_prompts -> 4 samples (truncation ignored)."""
    rows = [row(words(3, 4), 10), row(TWELVE, 11), row(words(5), 12), row(words(6, 7, 8), 13), row(words(9), 14)]
    ds = RLHFDataset(
        rows_file(rows),
        toy_tokenizer(),
        DataConfig(max_prompt_length=8, filter_overlong_prompts=True, truncation="error"),
    )
    assert len(ds) == 4
    assert ds.num_filtered == 1
    assert [ds[i]["index"] for i in range(4)] == [10, 12, 13, 14]
    assert ds[2]["raw_prompt_ids"] == [6, 7, 8]


# ------------------------------------------------------------------ B12 / B17: padding, mask, positions
def test_b12_left_padded_position_ids(toy_tokenizer, rows_file, row) -> None:
    """B12: [PAD, PAD, 11, 12] -> positions [0, 0, 0, 1]; with a 2-token response [0, 0, 0, 1, 2, 3]."""
    ds = RLHFDataset(rows_file([row(words(11, 12), 0)]), toy_tokenizer(), DataConfig(max_prompt_length=4))
    sample = ds[0]
    assert sample["input_ids"].tolist() == [0, 0, 11, 12]
    assert sample["attention_mask"].tolist() == [0, 0, 1, 1]
    assert sample["position_ids"].tolist() == [0, 0, 0, 1]
    full_mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
    assert position_ids_from_attention_mask(full_mask).tolist() == [[0, 0, 0, 1, 2, 3]]


def test_b17_pad_equals_eos_keeps_prompt_attention(toy_tokenizer, rows_file, row) -> None:
    """B17: no pad token -> pad = eos = 2; prompt [1, 2, 9] keeps mask [1, 1, 1] (by position, not value)."""
    tok = toy_tokenizer(pad=False)
    assert tok.pad_token_id is None and tok.eos_token_id == 2
    ds = RLHFDataset(rows_file([row(words(1, 2, 9), 0)]), tok, DataConfig(max_prompt_length=5))
    sample = ds[0]
    assert sample["input_ids"].tolist() == [2, 2, 1, 2, 9]
    assert sample["attention_mask"].tolist() == [0, 0, 1, 1, 1]
    assert sample["position_ids"].tolist() == [0, 0, 0, 1, 2]
    ids, mask, pos = left_pad([1, 2, 9], 3, pad_id=2)
    assert (ids.tolist(), mask.tolist(), pos.tolist()) == ([1, 2, 9], [1, 1, 1], [0, 1, 2])


# ------------------------------------------------------------------ B27: one BOS
def test_b27_template_bos_is_not_doubled(toy_tokenizer, rows_file, row) -> None:
    """B27: template starts with BOS and encoding adds BOS; the prompt holds BOS once, at index 0."""
    template = (
        "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %} w5{% endif %}"
    )
    tok = toy_tokenizer(bos_on_encode=True, chat_template=template)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert tok(text)["input_ids"] == [1, 1, 20, 5]  # the faulty path really doubles BOS with this tokenizer
    ds = RLHFDataset(rows_file([row("hi", 0)]), tok, DataConfig(max_prompt_length=6))
    sample = ds[0]
    assert sample["raw_prompt_ids"] == [1, 20, 5]
    assert sample["input_ids"].tolist() == [0, 0, 0, 1, 20, 5]
    kept = sample["input_ids"][sample["attention_mask"].bool()].tolist()
    assert kept == sample["raw_prompt_ids"]  # engine ids == training-forward ids


def test_chat_template_kwargs_and_generation_prompt(toy_tokenizer, rows_file, row) -> None:
    template = (
        "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        "{% if thinking %}w30 {% endif %}{% if add_generation_prompt %}w31{% endif %}"
    )
    path = rows_file([row("w3", 0)])
    tok = toy_tokenizer(chat_template=template)
    plain = RLHFDataset(path, tok, DataConfig(max_prompt_length=4))
    think = RLHFDataset(path, tok, DataConfig(max_prompt_length=4, apply_chat_template_kwargs={"thinking": True}))
    assert plain[0]["raw_prompt_ids"] == [3, 31]
    assert think[0]["raw_prompt_ids"] == [3, 30, 31]


def test_processor_renders_the_template(toy_tokenizer, rows_file, row) -> None:
    class Processor:
        def apply_chat_template(self, conversations: list[Any], **kwargs: Any) -> list[str]:
            assert kwargs["add_generation_prompt"] is True and kwargs["tokenize"] is False
            return ["w33 " + c[0]["content"] for c in conversations]

    ds = RLHFDataset(rows_file([row("w4", 0)]), toy_tokenizer(), DataConfig(max_prompt_length=3), processor=Processor())
    assert ds[0]["raw_prompt_ids"] == [33, 4]


# ------------------------------------------------------------------ sample contents
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_sample_fields(toy_tokenizer, rows_file, row, suffix: str) -> None:
    rows = [row("w3 w4", 5, truth="12"), row("w6", None, truth="1", ability="logic")]
    ds = RLHFDataset(
        rows_file(rows, "d" + suffix), toy_tokenizer(), DataConfig(max_prompt_length=4, return_raw_chat=True)
    )
    assert len(ds) == 2
    first, second = ds[0], ds[1]
    assert first["data_source"] == "toy" and first["ability"] == "math"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "12"}
    assert first["index"] == 5 and first["extra_info"]["split"] == "train"
    assert first["raw_prompt"] == [{"role": "user", "content": "w3 w4"}]
    assert first["input_ids"].dtype == torch.long and first["input_ids"].shape == (4,)
    assert second["index"] == 1  # no extra_info.index: the row's position in its file
    assert second["ability"] == "logic"
    without_raw = RLHFDataset(rows_file(rows, "e" + suffix), toy_tokenizer(), DataConfig(max_prompt_length=4))
    assert "raw_prompt" not in without_raw[0]


def test_several_files_concatenate(toy_tokenizer, rows_file, row) -> None:
    a = rows_file([row("w3", 0), row("w4", 1)], "a.parquet")
    b = rows_file([row("w5", 0)], "b.jsonl")
    ds = RLHFDataset([a, b], toy_tokenizer(), DataConfig(max_prompt_length=2))
    assert [ds[i]["raw_prompt_ids"] for i in range(3)] == [[3], [4], [5]]


# ------------------------------------------------------------------ malformed rows
BAD_ROWS = {
    "missing prompt": ({"data_source": "toy", "reward_model": {"ground_truth": "1"}}, "'prompt'"),
    "prompt is a string": ({"data_source": "toy", "prompt": "w3", "reward_model": {"ground_truth": "1"}}, "'prompt'"),
    "message without content": (
        {"data_source": "toy", "prompt": [{"role": "user"}], "reward_model": {"ground_truth": "1"}},
        r"'prompt\[0\]'",
    ),
    "missing ground_truth": (
        {"data_source": "toy", "prompt": [{"role": "user", "content": "w3"}], "reward_model": {"style": "rule"}},
        "'reward_model.ground_truth'",
    ),
    "data_source not a string": (
        {"data_source": 3, "prompt": [{"role": "user", "content": "w3"}], "reward_model": {"ground_truth": "1"}},
        "'data_source'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_malformed_jsonl_row_names_file_row_and_field(toy_tokenizer, rows_file, row, case: str) -> None:
    bad, field = BAD_ROWS[case]
    path = rows_file([row("w3"), row("w4"), bad], "bad.jsonl")
    with pytest.raises(ValueError, match=rf"bad\.jsonl: row 2 \(line 3\): field {field}"):
        RLHFDataset(path, toy_tokenizer(), DataConfig(max_prompt_length=8))


def test_malformed_parquet_row_names_file_row_and_field(toy_tokenizer, rows_file, row) -> None:
    good = row("w3", 0)
    bad = row("w4", 1)
    bad["reward_model"] = {"style": "rule", "ground_truth": None}
    path = rows_file([good, good, good, bad], "bad.parquet")
    with pytest.raises(ValueError, match=r"bad\.parquet: row 3: field 'reward_model.ground_truth'"):
        RLHFDataset(path, toy_tokenizer(), DataConfig(max_prompt_length=8))


def test_invalid_json_line_and_missing_file(toy_tokenizer, tmp_path, row) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"data_source": "toy"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.jsonl: row 1 \(line 2\): invalid JSON"):
        RLHFDataset(str(path), toy_tokenizer(), DataConfig())
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        RLHFDataset(str(tmp_path / "nope.parquet"), toy_tokenizer(), DataConfig())


def test_unknown_truncation_mode_is_rejected(toy_tokenizer, rows_file, row) -> None:
    with pytest.raises(ValueError, match="unknown data.truncation 'both'"):
        RLHFDataset(rows_file([row("w3")]), toy_tokenizer(), DataConfig(truncation="both"))


def test_builtin_rows_load(toy_tokenizer) -> None:
    from verl.data.builtin_task import load_builtin_rows

    rows = load_builtin_rows("arithmetic", "test")
    ds = RLHFDataset("builtin://arithmetic/test", toy_tokenizer(), DataConfig(max_prompt_length=4096))
    assert len(ds) == len(rows) > 0
    assert ds[0]["reward_model"]["ground_truth"] == rows[0]["reward_model"]["ground_truth"]
