"""Multi-turn SFT rows with tool calls (verl's messages + tools columns) for the engine-layout SFT tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 3*4"}},
            "required": ["expression"],
        },
    },
}


def tool_conversation(a: int, b: int) -> dict[str, Any]:
    """user asks a*b -> assistant calls the calculator -> tool answers -> assistant answers."""
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}}
    return {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"What is {a}*{b}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": f"{a}*{b} = {a * b}."},
        ],
        "tools": json.dumps([CALCULATOR]),
    }


def plain_conversation(a: int, b: int) -> dict[str, Any]:
    """Two user/assistant exchanges, no tools column value."""
    return {
        "messages": [
            {"role": "user", "content": f"Add {a} and {b}."},
            {"role": "assistant", "content": str(a + b)},
            {"role": "user", "content": "And doubled?"},
            {"role": "assistant", "content": str(2 * (a + b))},
        ],
        "tools": "",
    }


def write_multiturn_parquet(root: Path, n_train: int = 8, n_test: int = 4) -> dict[str, str]:
    """``train.parquet`` / ``test.parquet`` under ``root`` (half tool calls, half plain chats)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for split, n, offset in (("train", n_train, 0), ("test", n_test, 50)):
        rows = [(tool_conversation if i % 2 == 0 else plain_conversation)(11 + i + offset, 7 + i) for i in range(n)]
        path = root / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        out[split] = str(path)
    return out
