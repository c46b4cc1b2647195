"""verl's data keys: max_samples, validation_shuffle, return_full_prompt, custom_cls."""

from __future__ import annotations

import textwrap

from verl.config import load_config
from verl.data import RLDataLoader


def _loader(overrides, split="train"):
    cfg = load_config("quickstart", overrides)
    return RLDataLoader(cfg.data, split=split)


def test_max_samples_limits_both_splits_and_split_keys_override():
    dl = _loader(["data.max_samples=40", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"])
    assert len(dl.dataset) == 40 and len(dl) == 5
    assert len(_loader(["data.max_samples=40"], "val").dataset) == 40
    assert len(_loader(["data.max_samples=40", "data.val_max_samples=7"], "val").dataset) == 7
    dl = _loader(
        ["data.train_max_samples=16", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    )
    assert len(dl.dataset) == 16
    full = _loader([], "val").dataset
    first = next(iter(_loader(["data.val_max_samples=3"], "val")))
    assert [int(x) for x in first["index"]] == [int(full[i]["index"]) for i in range(3)]


def test_validation_shuffle_changes_order_only():
    plain = next(iter(_loader(["data.val_max_samples=20"], "val")))
    shuffled = next(iter(_loader(["data.val_max_samples=20", "data.validation_shuffle=true"], "val")))
    a, b = [int(x) for x in plain["index"]], [int(x) for x in shuffled["index"]]
    assert a != b and sorted(a) == sorted(b)


def test_return_full_prompt_is_the_templated_text():
    batch = next(iter(_loader(["data.return_full_prompt=true", "data.val_max_samples=2"], "val")))
    dl = _loader(["data.val_max_samples=2"], "val")
    tok = dl.tokenizer
    for text, ids in zip(batch["full_prompts"], batch["raw_prompt_ids"]):
        assert tok(text, add_special_tokens=False)["input_ids"] == list(ids)
    assert "full_prompts" not in next(iter(dl))


def test_custom_cls_dataset_is_built_with_verls_arguments(tmp_path):
    file = tmp_path / "my_dataset.py"
    file.write_text(
        textwrap.dedent("""
        from verl.data.rl_dataset import RLHFDataset

        class Doubled(RLHFDataset):
            def __init__(self, data_files, tokenizer, config, processor=None):
                super().__init__(data_files, tokenizer, config, processor=processor)
                self.rows = self.rows + self.rows
                self.prompt_ids = self.prompt_ids + self.prompt_ids
    """)
    )
    base = len(_loader([], "val").dataset)
    dl = _loader([f"data.custom_cls.path={file}", "data.custom_cls.name=Doubled"], "val")
    assert type(dl.dataset).__name__ == "Doubled" and len(dl.dataset) == 2 * base
