"""Built-in supervised data derived from the built-in ``arithmetic`` task (no download).

* ``builtin://arithmetic_preference/<split>`` — preference pairs for DPO: ``prompt`` is the
  task's user message (``[{"role": "user", "content": "47+38"}]``), ``chosen`` the correct sum
  (``"85"``) and ``rejected`` a wrong one: the carry-forgetting sum
  (`sloppy_sum`, ``"75"``) when the problem carries, else the sum off by
  ten (``"41+38"`` → ``"89"``), the same digit-level slip in the tens column. Splits follow the
  task's (train / test disjoint by unordered operand pair).
* ``builtin://arithmetic_sft/train`` — the built-in model's warm-start data: ``prompt`` /
  ``response`` rows where the sloppy teacher forgets the carry with probability
  ``teacher_forget_carry`` (see `verl.recipes.tiny_arithmetic`), in the task's train order.
* ``builtin://arithmetic_answers/<split>`` — ``prompt`` / ``response`` rows with the correct sum
  (SFT stream of the hybrid example).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_builtin_supervised", "load_builtin_supervised", "preference_rows", "sloppy_sum", "teacher_sft_rows"]

_PREFIX = "builtin://"
_SETS = ("arithmetic_preference", "arithmetic_sft", "arithmetic_answers")


def sloppy_sum(a: int, b: int) -> int:
    """``a + b`` computed column by column without carrying into the next column.

    The top column is written in full, so only carries between columns are lost:
    ``sloppy_sum(47, 38) == 75`` (true sum 85), ``sloppy_sum(71, 52) == 123`` (correct).

    Args:
        a: First non-negative operand.
        b: Second non-negative operand.

    Returns:
        The carry-forgetting sum.
    """
    width = max(len(str(a)), len(str(b)))
    total = 0
    for col in range(width):
        digit_sum = (a // 10**col) % 10 + (b // 10**col) % 10
        total += (digit_sum if col == width - 1 else digit_sum % 10) * 10**col
    return total


def preference_rows(split: str) -> list[dict[str, Any]]:
    """Preference pairs (chosen = correct sum) for every problem of ``split`` of the arithmetic task."""
    from verl.data.builtin_task import DATA_SOURCE, arithmetic_problems

    rows = []
    for a, b in arithmetic_problems(split):
        wrong = sloppy_sum(a, b) if sloppy_sum(a, b) != a + b else a + b + 10
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{a}+{b}"}],
                "chosen": str(a + b),
                "rejected": str(wrong),
            }
        )
    return rows


def teacher_sft_rows(teacher_forget_carry: float = 0.7, seed: int = 0) -> list[dict[str, Any]]:
    """The built-in model's SFT rows: ``prompt`` (problem text) and the sloppy teacher's ``response``."""
    import random

    from verl.data.builtin_task import arithmetic_problems

    rng = random.Random(seed)
    rows = []
    for a, b in arithmetic_problems("train"):
        # the draw happens only on carrying problems, as in verl.recipes.tiny_arithmetic's teacher
        forget = sloppy_sum(a, b) != a + b and rng.random() < teacher_forget_carry
        rows.append({"prompt": f"{a}+{b}", "response": str(sloppy_sum(a, b) if forget else a + b)})
    return rows


def is_builtin_supervised(path: str) -> bool:
    """Whether ``path`` names one of this module's built-in sets."""
    return path.startswith(_PREFIX) and path[len(_PREFIX) :].partition("/")[0] in _SETS


def load_builtin_supervised(path: str) -> list[dict[str, Any]]:
    """Rows of ``builtin://arithmetic_preference/<train|test>`` or ``builtin://arithmetic_sft/train``.

    Raises:
        ValueError: an unknown set or split.
    """
    name, _, split = path[len(_PREFIX) :].partition("/")
    if name == "arithmetic_preference" and split in ("train", "test"):
        return preference_rows(split)
    if name == "arithmetic_sft" and split == "train":
        return teacher_sft_rows()
    if name == "arithmetic_answers" and split in ("train", "test"):
        return [{"prompt": r["prompt"][0]["content"], "response": r["chosen"]} for r in preference_rows(split)]
    raise ValueError(
        f"unknown built-in supervised data {path!r}; valid: builtin://arithmetic_preference/train|test, "
        "builtin://arithmetic_sft/train, builtin://arithmetic_answers/train|test"
    )
