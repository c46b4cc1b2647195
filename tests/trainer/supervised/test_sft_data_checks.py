"""SFT / DPO data faults are reported before the model loads, naming file, row and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl.config.sft_loader import load_sft_config
from verl.utils.errors import DataError

BASE = [
    "model.partial_pretrain=builtin://tiny-arithmetic",
    "data.prompt_key=prompt",
    "data.response_key=response",
    "data.max_length=32",
    "data.train_batch_size=2",
    "data.micro_batch_size_per_gpu=2",
]


@pytest.fixture
def no_model(monkeypatch):
    """Any model build fails the test: the data check must come first."""
    import verl.modules

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the data was checked")

    monkeypatch.setattr(verl.modules, "create_model", refuse)


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def build(tmp_path: Path, *over: str):
    from verl.trainer.supervised.builders import build_supervised_trainer

    return build_supervised_trainer(
        load_sft_config(
            None,
            [*BASE, f"trainer.default_local_dir={tmp_path}/ckpt", f"trainer.output_dir={tmp_path}/out", *over],
            algorithm="sft",
        )
    )


def test_missing_prompt_column_in_val_file(tmp_path, no_model) -> None:
    val = write(tmp_path / "val.jsonl", [{"prompt": "1+1", "response": "2"}, {"question": "2+2", "response": "4"}])
    with pytest.raises(DataError, match=r"val\.jsonl: row 1 \(line 2\): no column 'prompt' \(data\.prompt_key"):
        build(tmp_path, "data.train_files=builtin://arithmetic_sft/train", f"data.val_files={val}")


def test_missing_messages_column(tmp_path, no_model) -> None:
    train = write(tmp_path / "chat.jsonl", [{"conversation": [{"role": "user", "content": "hi"}]}] * 2)
    with pytest.raises(
        DataError, match=r"chat\.jsonl: row 0 \(line 1\): no column 'messages' \(data\.multiturn\.messages_key"
    ):
        build(tmp_path, f"data.train_files={train}", "data.multiturn.enable=true", "data.val_files=[]")


def test_row_too_long_under_truncation_error(tmp_path, no_model) -> None:
    rows = [{"prompt": "1+1", "response": "2"}] * 3 + [{"prompt": "1+1", "response": "2" * 100}]
    train = write(tmp_path / "long.jsonl", rows)
    with pytest.raises(DataError, match=r"long\.jsonl: row 3 \(line 4\): \d+ tokens > data\.max_length=32"):
        build(tmp_path, f"data.train_files={train}", "data.truncation=error", "data.val_files=[]")


def test_missing_file_is_named(tmp_path, no_model) -> None:
    with pytest.raises(DataError, match="data file not found: .*nope.jsonl"):
        build(tmp_path, f"data.train_files={tmp_path}/nope.jsonl", "data.val_files=[]")
