"""``verl prepare gsm8k --multiturn``: verl's multi-turn GSM8K schema, on the real test file."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from verl.data.prepare import MULTITURN_INSTRUCTION, MULTITURN_SYSTEM_PROMPTS, convert_file, main
from verl.interactions import load_interactions, select_interaction
from verl.tools import FunctionCall, ToolSession, load_tools
from verl.tools.registry import BUILTIN_CONFIG_DIR


def test_tool_row_on_a_tiny_file(tmp_path):
    raw = tmp_path / "train.jsonl"
    raw.write_text(json.dumps({"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}) + "\n")
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path / "out"), "--multiturn"]) == 0
    [row] = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    prompt = "What is 2+3? " + MULTITURN_INSTRUCTION
    assert row == {
        "data_source": "openai/gsm8k",
        "agent_name": "tool_agent",
        "prompt": [
            {"role": "system", "content": MULTITURN_SYSTEM_PROMPTS["tool"]},
            {"role": "user", "content": prompt},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {
            "split": "train",
            "index": 0,
            "answer": "2+3=5\n#### 5",
            "question": "What is 2+3?",
            "need_tools_kwargs": True,
            "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "5"}}},
            "interaction_kwargs": {"name": "gsm8k", "query": prompt, "ground_truth": "5"},
        },
    }


def test_interaction_style_and_errors(tmp_path):
    raw = tmp_path / "test.jsonl"
    raw.write_text(json.dumps({"question": "Q?", "answer": "#### 7"}) + "\n")
    [row] = convert_file("gsm8k", raw, "test", multiturn="interaction")
    assert row["prompt"][0]["content"].endswith(
        "You should rethinking carefully if user point out your answer is wrong. "
        "Put your final answer in the format of `#### <answer>`."
    )
    assert "tools_kwargs" not in row["extra_info"] and row["extra_info"]["interaction_kwargs"]["ground_truth"] == "7"
    with pytest.raises(ValueError, match="--multiturn is not supported yet for math500"):
        convert_file("math500", raw, "test", multiturn="tool")
    assert main(["gsm8k", "--input", str(raw), "--out", str(tmp_path), "--multiturn", "chess"]) == 2


def test_real_gsm8k_test_file_drives_the_tool_and_interaction(shared_dir, tmp_path):
    src = shared_dir / "data" / "gsm8k" / "test.jsonl"
    assert main(["gsm8k", "--input", str(src), "--out", str(tmp_path), "--multiturn"]) == 0
    rows = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert len(rows) == 1319
    assert all(r["agent_name"] == "tool_agent" and r["prompt"][0]["role"] == "system" for r in rows)
    assert all(
        r["extra_info"]["tools_kwargs"]["calc_gsm8k_reward"]["create_kwargs"]["ground_truth"]
        == r["reward_model"]["ground_truth"]
        for r in rows
    )
    row = rows[0]
    assert row["reward_model"]["ground_truth"] == "18"
    tools = load_tools(BUILTIN_CONFIG_DIR / "gsm8k_tool_config.yaml")
    interaction = select_interaction(
        load_interactions(BUILTIN_CONFIG_DIR / "gsm8k_interaction_config.yaml"), row["extra_info"]["interaction_kwargs"]
    )

    async def trajectory():
        session = ToolSession(tools, row["extra_info"]["tools_kwargs"])
        wrong = await session.call(FunctionCall("calc_gsm8k_reward", {"answer": "16"}))
        right = await session.call(FunctionCall("calc_gsm8k_reward", {"answer": "18"}))
        iid = await interaction.start_interaction(None, **row["extra_info"]["interaction_kwargs"])
        turn = await interaction.generate_response(iid, [{"role": "assistant", "content": "So #### 18"}])
        return wrong, right, await session.close(), turn

    wrong, right, rewards, turn = asyncio.run(trajectory())
    assert (wrong.response.text, wrong.reward) == ("Current parsed answer='16' reward=0.0", -0.05)
    assert (right.response.text, right.reward) == ("Current parsed answer='18' reward=1.0", 0.0)
    assert rewards == {"calc_gsm8k_reward": 1.0}
    assert turn[0] is True and turn[2] == 1.0
