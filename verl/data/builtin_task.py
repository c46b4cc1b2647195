"""Built-in verifiable tasks for the quick start (``verl train`` with no arguments).

One task ships: ``arithmetic`` — two-digit addition where most problems need a carry.

* Prompt: one user message whose content is the bare problem, e.g. ``"47+38"``. The built-in
  tokenizer's chat template renders it as ``"<s>Q:47+38\\nA:"`` (11 tokens).
* Expected response: the sum, e.g. ``"85"``. The reward scorer for ``data_source =
  "builtin/arithmetic"`` (`verl.reward.scorers.arithmetic`) takes the last integer of the
  response and compares it with ``reward_model.ground_truth`` (1.0 if equal, else 0.0).
* The reasoning step that matters is the carry out of the ones column: the first digit written
  depends on it. ``CARRY_FRACTION`` (3 in 4) of the problems of each split need that carry, so a
  policy that forgets it scores about 25 % and one that carries scores about 100 %. The built-in
  model (`verl.modules.builtin`) is warm-started on a teacher that often forgets it, and RL with
  the exact-answer reward is what teaches it to carry.

Splits are disjoint by *unordered* operand pair ({47, 38} is in one split only, so ``38+47``
cannot leak the held-out ``47+38``) and fully deterministic: they depend on fixed seeds only,
never on global RNG state.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

__all__ = [
    "CARRY_FRACTION",
    "DATA_SOURCE",
    "TASKS",
    "arithmetic_problems",
    "load_builtin_rows",
    "needs_carry",
]

DATA_SOURCE = "builtin/arithmetic"
CARRY_FRACTION = 0.75
# Share of the problems of each split whose ones column carries (a + b ≥ 10 on the last digits).
_LOW, _HIGH = 10, 99
# Operands are two-digit numbers, inclusive range.
_SPLIT_SEED = 1234
# Seed of the assignment of unordered operand pairs to splits.
_TEST_PAIR_SHARE = 0.15
# Share of unordered operand pairs held out for the test split.
_TEST_SIZE = 512
# Rows in the test split (the validation set of the quick start).
_ROW_SEEDS = {"train": 1, "test": 2}
# Seed of the row sampling and order within each split.


def needs_carry(a: int, b: int) -> bool:
    """Whether ``a + b`` carries out of the ones column.

    Args:
        a: First operand (non-negative).
        b: Second operand (non-negative).

    Returns:
        True if ``a % 10 + b % 10 >= 10``, e.g. True for 47+38, False for 41+38.
    """
    return a % 10 + b % 10 >= 10


def _split_pairs(split: str) -> list[tuple[int, int]]:
    """Ordered operand pairs whose unordered pair belongs to ``split``, in a fixed order."""
    keys = [(a, b) for a in range(_LOW, _HIGH + 1) for b in range(a, _HIGH + 1)]
    random.Random(_SPLIT_SEED).shuffle(keys)
    n_test = round(_TEST_PAIR_SHARE * len(keys))
    chosen = keys[:n_test] if split == "test" else keys[n_test:]
    pairs = []
    for a, b in sorted(chosen):
        pairs.append((a, b))
        if a != b:
            pairs.append((b, a))
    return pairs


def arithmetic_problems(split: str) -> list[tuple[int, int]]:
    """The operand pairs ``(a, b)`` of one split of the ``arithmetic`` task, in row order.

    All carrying pairs of the split are used (the test split keeps ``CARRY_FRACTION`` of
    ``_TEST_SIZE``), completed with non-carrying pairs so that ``CARRY_FRACTION`` of the
    problems carry, then shuffled with the split's fixed seed.

    Args:
        split: ``"train"`` or ``"test"``.

    Returns:
        List of ``(a, b)`` with two-digit ``a`` and ``b``; the row ``i`` of
        `load_builtin_rows` asks for ``a + b`` of element ``i``.

    Raises:
        ValueError: For an unknown split.
    """
    if split not in _ROW_SEEDS:
        raise ValueError(f"unknown split {split!r} of built-in task 'arithmetic'; valid: {sorted(_ROW_SEEDS)}")
    rng = random.Random(_ROW_SEEDS[split])
    pairs = _split_pairs(split)
    carry = [p for p in pairs if needs_carry(*p)]
    plain = [p for p in pairs if not needs_carry(*p)]
    rng.shuffle(carry)
    rng.shuffle(plain)
    n_carry = round(CARRY_FRACTION * _TEST_SIZE) if split == "test" else len(carry)
    n_plain = round(n_carry * (1 - CARRY_FRACTION) / CARRY_FRACTION)
    if n_carry > len(carry) or n_plain > len(plain):
        raise AssertionError(f"split {split!r} too small for the carry mix ({len(carry)}, {len(plain)})")
    problems = carry[:n_carry] + plain[:n_plain]
    rng.shuffle(problems)
    return problems


def _arithmetic_rows(split: str) -> list[dict[str, Any]]:
    """Rows of the ``arithmetic`` task in verl's RL schema."""
    rows = []
    for index, (a, b) in enumerate(arithmetic_problems(split)):
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{a}+{b}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": index},
            }
        )
    return rows


def _calculator_rows(split: str) -> list[dict[str, Any]]:
    from verl.data.builtin_tool_task import load_tool_task_rows  # multi-turn task, see that module

    return load_tool_task_rows(split)


TASKS: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "arithmetic": _arithmetic_rows,
    "calculator": _calculator_rows,
}
# Built-in task name -> function of the split name returning the rows.


def load_builtin_rows(task: str, split: str) -> list[dict[str, Any]]:
    """Rows of a built-in task in verl's RL schema.

    Each row holds ``data_source``, ``prompt`` (a list of chat messages), ``ability``,
    ``reward_model`` (``{"style": "rule", "ground_truth": str}``) and ``extra_info``
    (``{"split", "index"}``). Rows are the same on every call and every machine.

    Args:
        task: Name in `TASKS`, e.g. ``"arithmetic"``.
        split: ``"train"`` or ``"test"`` (held out: disjoint from train).

    Returns:
        The rows, e.g. 4128 train and 512 test rows for ``arithmetic``.

    Raises:
        ValueError: For an unknown task (the message lists the valid names) or split.
    """
    if task not in TASKS:
        raise ValueError(f"unknown built-in task {task!r}; valid tasks: {sorted(TASKS)}")
    return TASKS[task](split)
