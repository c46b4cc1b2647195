"""``verl generate`` refuses to write its samples over its own prompts file, before any model loads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from verl.config.errors import ConfigError
from verl.config.offline import load_generation_config
from verl.commands.generate import generate


@pytest.fixture
def no_model(monkeypatch):
    import verl.modules
    import verl.run.model_access

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the output path was checked")

    monkeypatch.setattr(verl.modules, "create_model", refuse)
    monkeypatch.setattr(verl.run.model_access, "read_model_config", refuse)


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink", "dotted"])
def test_output_path_equal_to_data_path_is_refused(tmp_path: Path, no_model, link: str) -> None:
    prompts = tmp_path / "prompts.jsonl"
    text = json.dumps({"prompt": [{"role": "user", "content": "1+1"}]}) + "\n"
    prompts.write_text(text)
    out = {
        "same": prompts,
        "symlink": tmp_path / "alias.jsonl",
        "hardlink": tmp_path / "hard.jsonl",
        "dotted": tmp_path / "sub" / ".." / "prompts.jsonl",
    }[link]
    if link == "symlink":
        out.symlink_to(prompts)
    elif link == "hardlink":
        os.link(prompts, out)
    elif link == "dotted":
        (tmp_path / "sub").mkdir()
    cfg = load_generation_config(None, [f"data.path={prompts}", f"data.output_path={out}"])
    with pytest.raises(ConfigError, match=r"^data.output_path: .* is the prompts file data.path"):
        generate(cfg, log=lambda *_: None)
    assert prompts.read_text() == text
