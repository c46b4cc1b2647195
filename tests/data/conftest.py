"""Fixtures for data tests: a toy word-level tokenizer with chosen ids, and row-file writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

# Token "w<i>" has id i; ids 1, 2 and 20 are "<s>", "</s>" and "hi" (0 = PAD, 2 = EOS).
_SPECIAL = {0: "<pad>", 1: "<s>", 2: "</s>", 20: "hi"}
CONTENT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def make_toy_tokenizer(
    *,
    pad: bool = True,
    bos_on_encode: bool = False,
    chat_template: str = CONTENT_TEMPLATE,
) -> PreTrainedTokenizerFast:
    """A 40-word whitespace tokenizer; "w7" -> 7, "</s>" -> 2, "hi" -> 20.

    Args:
        pad: register "<pad>" (id 0) as pad token; False leaves the tokenizer without one.
        bos_on_encode: add "<s>" (id 1) in front whenever special tokens are added.
        chat_template: Jinja chat template (default: the messages' contents concatenated).
    """
    words = [_SPECIAL.get(i, f"w{i}") for i in range(40)]
    vocab = {w: i for i, w in enumerate(words)}
    vocab["<unk>"] = len(words)
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos_on_encode:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    kwargs: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    if pad:
        kwargs["pad_token"] = "<pad>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template, **kwargs)


def make_row(content: str, index: int | None = None, truth: str = "7", **extra: Any) -> dict[str, Any]:
    """A valid verl RL row with one user message."""
    row: dict[str, Any] = {
        "data_source": "toy",
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
    }
    if index is not None:
        row["extra_info"] = {"index": index, "split": "train"}
    row.update(extra)
    return row


def write_rows(path: Path, rows: list[Any]) -> str:
    """Write rows as ``.jsonl`` (one JSON value per line) or ``.parquet`` by the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture
def toy_tokenizer() -> Callable[..., PreTrainedTokenizerFast]:
    """Factory: ``toy_tokenizer(pad=..., bos_on_encode=..., chat_template=...)``."""
    return make_toy_tokenizer


@pytest.fixture
def rows_file(tmp_path: Path) -> Callable[[list[Any], str], str]:
    """Factory: ``rows_file(rows, "name.jsonl" | "name.parquet") -> path``."""

    def write(rows: list[Any], name: str = "rows.parquet") -> str:
        return write_rows(tmp_path / name, rows)

    return write


@pytest.fixture
def row() -> Callable[..., dict[str, Any]]:
    """Factory: ``row(content, index=None, truth="7", **extra)`` -> a valid verl RL row."""
    return make_row
