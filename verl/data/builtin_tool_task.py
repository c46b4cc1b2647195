"""Built-in multi-turn task ``calculator``: two-digit multiplication with a calculator tool.

* Prompt: one user message with the bare problem, e.g. ``"47*38"``; the row names the
  ``tool_agent`` loop and the tool config :data:`TOOL_CONFIG_PATH` (the built-in
  ``calculator(expression)`` tool, `verl.tools.calculator`).
* A tiny model cannot multiply two-digit numbers in its head, but it can copy: the winning
  trajectory is ``<tool_call>{"name": "calculator", "arguments": {"expression": "47*38"}}
  </tool_call>`` → the tool answers ``1786`` → the model answers ``1786``.
* Reward: ``data_source = "builtin/calculator"`` routes to `verl.reward.scorers.tool_answer`
  (the last integer *outside* tool blocks must equal ``reward_model.ground_truth``), so copying
  the tool's answer into the final turn is required.
* The warm-started model (`verl.recipes.tiny_calculator`) calls the tool only on some
  problems and guesses otherwise; RL with the exact-answer reward teaches it to call the tool.

Splits are disjoint by *unordered* operand pair ({47, 38} is in one split only) and fully
deterministic (fixed seeds, never the global RNG).
"""

from __future__ import annotations

from pathlib import Path

import random
from typing import Any


__all__ = ["DATA_SOURCE", "TOOL_CONFIG_PATH", "load_tool_task_rows", "multiplication_problems"]

DATA_SOURCE = "builtin/calculator"
# the tools package ships the config (verl/tools/configs); named by path so data imports no tools
TOOL_CONFIG_PATH = Path(__file__).resolve().parents[1] / "tools" / "configs" / "calculator_tool_config.yaml"
AGENT_NAME = "tool_agent"
_LOW, _HIGH = 10, 99
# Operands are two-digit numbers, inclusive range.
_SPLIT_SEED = 4321
_TEST_PAIR_SHARE = 0.1
_TEST_SIZE = 256
# Rows of the test split (the held-out validation set).
_ROW_SEEDS = {"train": 11, "test": 12}


def multiplication_problems(split: str) -> list[tuple[int, int]]:
    """Operand pairs ``(a, b)`` of one split, in row order (row ``i`` asks for ``a*b``).

    Args:
        split: ``"train"`` (every ordered pair of the train unordered pairs, about 7,300) or
            ``"test"`` (:data:`_TEST_SIZE` pairs).

    Raises:
        ValueError: unknown split.
    """
    if split not in _ROW_SEEDS:
        raise ValueError(f"unknown split {split!r} of built-in task 'calculator'; valid: {sorted(_ROW_SEEDS)}")
    keys = [(a, b) for a in range(_LOW, _HIGH + 1) for b in range(a, _HIGH + 1)]
    random.Random(_SPLIT_SEED).shuffle(keys)
    n_test = round(_TEST_PAIR_SHARE * len(keys))
    chosen = keys[:n_test] if split == "test" else keys[n_test:]
    pairs = []
    for a, b in sorted(chosen):
        pairs.append((a, b))
        if a != b:
            pairs.append((b, a))
    random.Random(_ROW_SEEDS[split]).shuffle(pairs)
    return pairs[:_TEST_SIZE] if split == "test" else pairs


def load_tool_task_rows(split: str) -> list[dict[str, Any]]:
    """Rows of the ``calculator`` task in verl's multi-turn RL schema.

    Each row: ``data_source``, ``agent_name`` (``tool_agent``), ``prompt`` (one user message),
    ``ability``, ``reward_model`` (``{"style": "rule", "ground_truth": "1786"}``) and
    ``extra_info`` (``split``, ``index``; no ``tools_kwargs``: the calculator needs none).

    Raises:
        ValueError: unknown split.
    """
    rows = []
    for index, (a, b) in enumerate(multiplication_problems(split)):
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "agent_name": AGENT_NAME,
                "prompt": [{"role": "user", "content": f"{a}*{b}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a * b)},
                "extra_info": {"split": split, "index": index, "need_tools_kwargs": False},
            }
        )
    return rows
