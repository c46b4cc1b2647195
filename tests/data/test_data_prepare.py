"""``verl prepare``: raw GSM8K / MATH-500 jsonl -> verl RL parquet, checked on the real files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl.config.schema import DataConfig
from verl.data import RLHFDataset
from verl.data.prepare import GSM8K_INSTRUCTION, MATH_INSTRUCTION, convert_file, gsm8k_ground_truth, main


def test_gsm8k_ground_truth_hand_values() -> None:
    assert gsm8k_ground_truth("2+40=42\n#### 42") == "42"
    assert gsm8k_ground_truth("...\n#### 1,234,567") == "1234567"
    assert gsm8k_ground_truth("#### -3.5") == "-3.5"
    with pytest.raises(ValueError, match="####"):
        gsm8k_ground_truth("the answer is 5")


def test_rows_from_a_tiny_file(tmp_path: Path) -> None:
    raw = tmp_path / "train.jsonl"
    raw.write_text(json.dumps({"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}) + "\n\n", encoding="utf-8")
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path / "out")]) == 0
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert rows == [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "What is 2+3? " + GSM8K_INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "5"},
            "extra_info": {"split": "train", "index": 0, "answer": "2+3=5\n#### 5", "question": "What is 2+3?"},
        }
    ]
    assert GSM8K_INSTRUCTION == 'Let\'s think step by step and output the final answer after "####".'


def test_malformed_line_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = tmp_path / "test.jsonl"
    good = json.dumps({"question": "q", "answer": "#### 1"})
    raw.write_text(good + "\n" + json.dumps({"question": "q", "answer": "no final line"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"test\.jsonl: line 2: .*####"):
        convert_file("gsm8k", raw, "test")
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path / "o")]) == 1
    assert "test.jsonl: line 2" in capsys.readouterr().err
    raw.write_text(good + "\n" + good + "\n{broken\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"test\.jsonl: line 3"):
        convert_file("gsm8k", raw, "test")
    raw.write_text(json.dumps({"problem": "p", "solution": "s"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"test\.jsonl: line 1: field 'answer'"):
        convert_file("math500", raw, "test")


def test_split_inference_and_usage_errors(tmp_path: Path) -> None:
    raw = tmp_path / "mydata.jsonl"
    raw.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n", encoding="utf-8")
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path / "o")]) == 2  # stem is no split
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path / "o"), "--split", "test"]) == 0
    assert pq.read_table(tmp_path / "o" / "test.parquet").to_pylist()[0]["extra_info"]["split"] == "test"
    from verl.cli import main as verl_main

    assert verl_main(["prepare", "gsm8k", "--input", str(raw), "--out", str(tmp_path / "cli"), "--split", "train"]) == 0
    assert (tmp_path / "cli" / "train.parquet").is_file()
    assert main(["countdown", "--input", str(raw), "--out", str(tmp_path / "o")]) == 2
    assert (
        main(["gsm8k", "--input", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o"), "--split", "train"])
        == 1
    )


# ------------------------------------------------------------------ the real files in ../shared
@pytest.fixture(scope="module")
def prepared(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three real files converted once: gsm8k train/test and math500 test."""
    out = tmp_path_factory.mktemp("prepared")
    data = shared_dir / "data"
    for task, raw in (("gsm8k", "gsm8k/train.jsonl"), ("gsm8k", "gsm8k/test.jsonl"), ("math500", "math500/test.jsonl")):
        if not (data / raw).is_file():
            pytest.skip(f"{data / raw} not found")
        assert main([task, "--input", str(data / raw), "--out", str(out / task)]) == 0
    return {
        "gsm8k_train": out / "gsm8k" / "train.parquet",
        "gsm8k_test": out / "gsm8k" / "test.parquet",
        "math500_test": out / "math500" / "test.parquet",
    }


def test_real_counts_and_schema(prepared: dict[str, Path]) -> None:
    counts = {name: pq.read_metadata(path).num_rows for name, path in prepared.items()}
    assert counts == {"gsm8k_train": 7473, "gsm8k_test": 1319, "math500_test": 500}
    schema = pq.read_schema(prepared["gsm8k_test"])
    assert set(schema.names) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert str(schema.field("prompt").type) == "list<element: struct<role: string, content: string>>"


def test_real_gsm8k_ground_truths(prepared: dict[str, Path]) -> None:
    test = pq.read_table(prepared["gsm8k_test"]).to_pylist()
    assert test[0]["reward_model"] == {"style": "rule", "ground_truth": "18"}  # Janet's ducks
    assert test[0]["prompt"][0]["content"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert test[0]["prompt"][0]["content"].endswith(' output the final answer after "####".')
    assert test[146]["reward_model"]["ground_truth"] == "2125"  # "#### 2,125": commas removed
    assert test[489]["reward_model"]["ground_truth"] == "-10"
    assert test[1318]["reward_model"]["ground_truth"] == "14"
    assert test[1318]["extra_info"]["index"] == 1318 and test[1318]["extra_info"]["split"] == "test"
    train = pq.read_table(prepared["gsm8k_train"], columns=["reward_model", "extra_info"]).to_pylist()
    assert train[0]["reward_model"]["ground_truth"] == "72"  # Natalia's clips
    assert train[0]["extra_info"]["answer"].endswith("#### 72")
    assert all("," not in r["reward_model"]["ground_truth"] for r in train)


def test_real_math500_rows(prepared: dict[str, Path]) -> None:
    rows = pq.read_table(prepared["math500_test"]).to_pylist()
    first = rows[0]
    assert first["data_source"] == "HuggingFaceH4/MATH-500"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "\\left( 3, \\frac{\\pi}{2} \\right)"}
    assert first["prompt"][0]["content"].startswith("Convert the point $(0,3)$ in rectangular coordinates")
    assert first["prompt"][0]["content"].endswith(" " + MATH_INSTRUCTION)
    assert MATH_INSTRUCTION == "Let's think step by step and output the final answer within \\boxed{}."
    assert first["extra_info"]["answer"].endswith("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$")


def test_real_gsm8k_test_through_rlhf_dataset_with_qwen(prepared: dict[str, Path], shared_dir: Path) -> None:
    """The prepared parquet feeds RLHFDataset with the real Qwen2.5 tokenizer and its ChatML template."""
    tok_dir = shared_dir / "tokenizers" / "qwen2.5"
    if not tok_dir.is_dir():
        pytest.skip(f"{tok_dir} not found")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    ds = RLHFDataset(str(prepared["gsm8k_test"]), tok, DataConfig(max_prompt_length=512))
    assert len(ds) == 1319
    sample = ds[0]
    text = tok.decode(sample["raw_prompt_ids"])
    assert text.startswith("<|im_start|>system\nYou are Qwen")
    assert "<|im_start|>user\nJanet\u2019s ducks lay 16 eggs per day." in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    n = len(sample["raw_prompt_ids"])
    assert sample["input_ids"].shape == (512,)
    assert sample["attention_mask"].sum().item() == n
    assert sample["input_ids"][:-n].eq(tok.pad_token_id).all() and tok.pad_token_id == 151643
    assert sample["position_ids"][-n:].tolist() == list(range(n))
    assert sample["reward_model"]["ground_truth"] == "18" and sample["data_source"] == "openai/gsm8k"
