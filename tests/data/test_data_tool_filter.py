"""``data.tool_config_path``: ``filter_overlong_prompts`` measures prompts with the tool schemas
rendered by the chat template (verl's RL dataset); the kept prompt ids are rendered without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.config.compat.seed_layout import BUILTIN_TOOL_CONFIG
from verl.config.loader import load_config
from verl.config.schema import DataConfig
from verl.data import RLDataLoader, RLHFDataset, create_rl_dataset
from verl.data.builtin_tokenizer import build_tool_tokenizer
from verl.data.rl_dataset import render_prompts
from verl.tools import load_tool_schemas
from verl.trainer.ppo.builders import data_tool_schemas

SHORT, LONG = "1+1", "1+1" + "0" * 20


def _rows_file(tmp_path: Path) -> str:
    import json

    rows = [
        {
            "data_source": "builtin/calculator",
            "prompt": [{"role": "user", "content": c}],
            "reward_model": {"style": "rule", "ground_truth": "2"},
        }
        for c in (SHORT, LONG)
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _lengths(tok, tools=None) -> list[int]:
    kwargs = {"tools": tools} if tools else {}
    return [len(x) for x in render_prompts(tok, [[{"role": "user", "content": c}] for c in (SHORT, LONG)], kwargs)]


def test_filter_counts_the_rendered_tool_schemas(tmp_path: Path) -> None:
    tok = build_tool_tokenizer()
    schemas = load_tool_schemas(BUILTIN_TOOL_CONFIG)
    plain, with_tools = _lengths(tok), _lengths(tok, schemas)
    assert with_tools[0] - plain[0] == len("S:calculator\n")  # the template's tool line, one token per character
    max_len = plain[1]  # LONG fits alone, not with the tool line; SHORT fits either way
    assert with_tools[0] <= max_len < with_tools[1]
    cfg = DataConfig(max_prompt_length=max_len, filter_overlong_prompts=True, tool_config_path=BUILTIN_TOOL_CONFIG)
    path = _rows_file(tmp_path)
    without = RLHFDataset(path, tok, cfg)
    assert len(without) == 2 and without.num_filtered == 0
    counted = RLHFDataset(path, tok, cfg, tool_schemas=schemas)
    assert len(counted) == 1 and counted.num_filtered == 1
    assert counted[0]["raw_prompt_ids"] == without[0]["raw_prompt_ids"]  # kept ids: rendered without the tools
    assert len(counted[0]["raw_prompt_ids"]) == plain[0]
    # without the filter the schemas change nothing (as in verl)
    kept = RLHFDataset(path, tok, DataConfig(max_prompt_length=max_len, truncation="error"), tool_schemas=schemas)
    assert len(kept) == 2


def test_loader_refuses_tool_config_without_schemas_and_the_trainer_loads_them(tmp_path: Path) -> None:
    tok = build_tool_tokenizer()
    path = _rows_file(tmp_path)
    max_len = _lengths(tok)[1]
    cfg = DataConfig(
        train_files=[path],
        train_batch_size=1,
        max_prompt_length=max_len,
        filter_overlong_prompts=True,
        tool_config_path=BUILTIN_TOOL_CONFIG,
    )
    with pytest.raises(ValueError, match="data.tool_config_path=.*tool_schemas="):
        create_rl_dataset(path, tok, cfg)
    schemas = data_tool_schemas(cfg)
    assert schemas == load_tool_schemas(BUILTIN_TOOL_CONFIG) and schemas[0]["function"]["name"] == "calculator"
    assert len(RLDataLoader(cfg, tokenizer=tok, tool_schemas=schemas).dataset) == 1
    cfg.tool_config_path = "builtin://calculator"  # the shipped config, as the agent loop resolves it
    assert data_tool_schemas(cfg) == schemas
    cfg.filter_overlong_prompts = False
    assert data_tool_schemas(cfg) is None  # nothing reads the tools then: they are not built


def test_tool_config_path_defaults_to_the_multi_turn_one(tmp_path: Path) -> None:
    mt = "actor_rollout_ref.rollout.multi_turn"
    cfg = load_config(
        None,
        [
            f"{mt}.enable=true",
            f"{mt}.tool_config_path={BUILTIN_TOOL_CONFIG}",
            "data.return_raw_chat=true",
            f"trainer.default_local_dir={tmp_path}",
        ],
    )
    assert cfg.data.tool_config_path == BUILTIN_TOOL_CONFIG  # verl: ${oc.select:...multi_turn.tool_config_path, null}
    assert load_config(None, [f"trainer.default_local_dir={tmp_path}"]).data.tool_config_path is None
