"""RLDataLoader: batching, seeded shuffling, exact resume (B32), tokenizer resolution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from verl.config.schema import DataConfig
from verl.data import RLDataLoader, RLHFDataset
from verl.protocol import DataProto


def _config(**kw: Any) -> DataConfig:
    base: dict[str, Any] = {"max_prompt_length": 3, "train_batch_size": 3, "seed": 7}
    base.update(kw)
    return DataConfig(**base)


@pytest.fixture
def ten(toy_tokenizer, rows_file, row) -> tuple[str, Any]:
    """A parquet file of 10 prompts (index i, content "w<i+3>") and the toy tokenizer."""
    path = rows_file([row(f"w{i + 3}", i) for i in range(10)], "ten.parquet")
    return path, toy_tokenizer()


def _loader(ten: tuple[str, Any], **kw: Any) -> RLDataLoader:
    path, tok = ten
    split = kw.pop("split", "train")
    return RLDataLoader(_config(train_files=[path], val_files=[path], **kw), tokenizer=tok, split=split)


def _indices(batches: list[dict[str, Any]]) -> list[list[int]]:
    return [[int(i) for i in b["index"]] for b in batches]


def _epochs(loader: RLDataLoader, n: int) -> list[list[int]]:
    return _indices([b for _ in range(n) for b in loader])


def test_batch_layout(ten) -> None:
    batch = next(iter(_loader(ten)))
    assert batch["input_ids"].shape == (3, 3) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].shape == (3, 3) and batch["position_ids"].shape == (3, 3)
    for key in ("data_source", "reward_model", "extra_info", "index", "raw_prompt_ids", "ability"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (3,)
    # each row's prompt is its index + 3, left-padded with pad 0 to width 3
    for ids, index in zip(batch["input_ids"].tolist(), batch["index"]):
        assert ids == [0, 0, int(index) + 3]
    proto = DataProto.from_single_dict(batch)
    assert len(proto) == 3


def test_len_and_drop_last(ten) -> None:
    assert len(_loader(ten)) == 3  # 10 // 3
    kept = _loader(ten, drop_last=False)
    assert len(kept) == 4
    assert [len(b["index"]) for b in kept] == [3, 3, 3, 1]
    assert sorted(i for b in _indices(list(kept)) for i in b) == list(range(10))


def test_val_split_whole_set_in_order(ten) -> None:
    whole = _loader(ten, split="val")
    assert len(whole) == 1
    assert _indices(list(whole)) == [list(range(10))]
    chunks = _loader(ten, split="val", val_batch_size=4)
    assert _indices(list(chunks)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_no_shuffle_is_file_order(ten) -> None:
    assert _epochs(_loader(ten, shuffle=False), 1) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_b32_shuffle_is_seeded_and_changes_per_epoch(ten) -> None:
    """B32: the sampler is seeded from data.seed; two fresh loaders agree; epochs differ."""
    a, b = _epochs(_loader(ten), 3), _epochs(_loader(ten), 3)
    assert a == b
    assert a[:3] != a[3:6]  # epoch 2 is a new permutation
    for epoch in (a[:3], a[3:6], a[6:]):  # 9 distinct prompts of 10 per epoch (drop_last)
        seen = [i for batch in epoch for i in batch]
        assert len(set(seen)) == 9 and set(seen) <= set(range(10))
    assert a[0] != [0, 1, 2] or a[1] != [3, 4, 5]  # actually shuffled
    assert _epochs(_loader(ten, seed=8), 1) != a[:3]


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4, 5])
def test_b32_resume_gives_the_same_following_batches(ten, stop_after: int) -> None:
    """B32: save after k batches (mid-epoch, at the epoch boundary, inside epoch 2); a new loader
    loaded from that state yields exactly the batches an uninterrupted loader yields next."""
    full = _epochs(_loader(ten), 3)  # 9 batches over 3 epochs
    first = _loader(ten)
    seen: list[dict[str, Any]] = []
    while len(seen) < stop_after:
        for batch in first:
            seen.append(batch)
            if len(seen) == stop_after:
                break
    state = first.state_dict()
    resumed = _loader(ten)
    resumed.load_state_dict(state)
    rest: list[dict[str, Any]] = []
    while len(seen) + len(rest) < len(full):
        rest.extend(resumed)
    assert _indices(seen) + _indices(rest) == full


def test_b32_resume_after_a_finished_epoch(ten) -> None:
    full = _epochs(_loader(ten), 2)
    first = _loader(ten)
    epoch1 = _indices(list(first))
    resumed = _loader(ten)
    resumed.load_state_dict(first.state_dict())
    assert epoch1 + _indices(list(resumed)) == full


def test_batch_larger_than_dataset_is_an_error(ten) -> None:
    with pytest.raises(ValueError, match="train_batch_size 11 > 10 prompts"):
        _loader(ten, train_batch_size=11)


def test_unknown_split_and_empty_val_files(ten) -> None:
    path, tok = ten
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        RLDataLoader(_config(train_files=[path]), tokenizer=tok, split="dev")
    with pytest.raises(ValueError, match="data.val_files is empty"):
        RLDataLoader(_config(train_files=[path], val_files=[]), tokenizer=tok, split="val")


def test_tokenizer_from_data_tokenizer_or_model_path(ten, tmp_path) -> None:
    path, tok = ten
    tok_dir = tmp_path / "tok"
    tok.save_pretrained(tok_dir)
    by_config = RLDataLoader(_config(train_files=[path], tokenizer=str(tok_dir)))
    by_model = RLDataLoader(_config(train_files=[path]), model_path=str(tok_dir))
    expected = _epochs(_loader(ten), 1)
    assert _epochs(by_config, 1) == expected and _epochs(by_model, 1) == expected
    assert by_model.dataset.prompt_ids == _loader(ten).dataset.prompt_ids == [[i + 3] for i in range(10)]
    with pytest.raises(ValueError, match="needs a tokenizer"):
        RLDataLoader(_config(train_files=[path]))


def test_ready_dataset_is_used_as_is(ten) -> None:
    path, tok = ten
    config = _config(train_files=["unused.parquet"])
    dataset = RLHFDataset(path, tok, config)
    loader = RLDataLoader(config, dataset=dataset)
    assert loader.dataset is dataset and len(loader) == 3


def test_default_config_uses_builtin_task_and_tokenizer() -> None:
    config = DataConfig(train_batch_size=4)
    loader = RLDataLoader(config)
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (4, config.max_prompt_length)
