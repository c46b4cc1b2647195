"""``verl prepare``: raw GSM8K / MATH-500 jsonl -> training parquet in verl's RL schema.

Usage::

    verl prepare gsm8k   --input raw/gsm8k/train.jsonl  --out data/gsm8k          # -> data/gsm8k/train.parquet
    verl prepare math500 --input raw/math500/test.jsonl --out data/math500 [--split test]
    verl prepare gsm8k   --input raw/gsm8k/test.jsonl   --out data/gsm8k_mt --multiturn [tool|interaction]

Rows follow verl's ``examples/data_preprocess/gsm8k.py`` and ``math_dataset.py``: the same
data_source names, instruction suffixes and ``reward_model = {style: rule, ground_truth}``, so the
reward scorers route and score them as verl does.

``--multiturn`` writes verl's multi-turn GSM8K schema (``gsm8k_tool_agent_loop.py`` /
``gsm8k_multiturn_w_tool.py``; ``interaction``: ``gsm8k_multiturn_w_interaction.py``): a system
prompt, ``agent_name: tool_agent``, and in ``extra_info`` the ``tools_kwargs`` that give the
``calc_gsm8k_reward`` tool its ground truth (``need_tools_kwargs: true``) and the
``interaction_kwargs`` (``name: gsm8k``, ``query``, ``ground_truth``) of the GSM8K interaction.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

GSM8K_SOURCE = "openai/gsm8k"
MATH500_SOURCE = "HuggingFaceH4/MATH-500"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
MULTITURN_INSTRUCTION = "Let's think step by step and output the final answer after `####`."
MULTITURN_SYSTEM_PROMPTS = {
    "tool": (
        "You are a math expert. You are given a question and you need to solve it step by step. "
        "Reasoning step by step before any tool call. "
        "You should use the `calc_gsm8k_reward` tool after step by step solving the question, "
        "before generate final answer at least once and refine your answer if necessary. "
        "Put your final answer in the format of `#### <answer>`."
    ),
    "interaction": (
        "You are a math expert. You are given a question and you need to solve it step by step. "
        "You should rethinking carefully if user point out your answer is wrong. "
        "Put your final answer in the format of `#### <answer>`."
    ),
}
GSM8K_TOOL_NAME = "calc_gsm8k_reward"
_GSM8K_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def gsm8k_ground_truth(solution: str) -> str:
    """The final answer of a GSM8K solution: the number after ``#### ``, commas removed.

    Raises:
        ValueError: no ``#### <number>`` in the solution.
    """
    found = _GSM8K_ANSWER.search(solution)
    if found is None:
        raise ValueError("answer has no final '#### <number>' line")
    return found.group(1).replace(",", "")


def _require_str(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"field {key!r} must be a non-empty string, got {value!r:.80}")
    return value


def gsm8k_row(raw: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One GSM8K record ``{question, answer}`` -> a verl RL row."""
    question = _require_str(raw, "question")
    answer = _require_str(raw, "answer")
    return {
        "data_source": GSM8K_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {GSM8K_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gsm8k_ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def gsm8k_multiturn_row(raw: dict[str, Any], index: int, split: str, style: str = "tool") -> dict[str, Any]:
    """One GSM8K record -> a verl multi-turn row (``style``: ``tool`` or ``interaction``).

    ``tool`` rows carry both the tool's ``tools_kwargs`` and the interaction's
    ``interaction_kwargs`` (so either config can drive them); ``interaction`` rows only the latter.

    Raises:
        ValueError: a malformed record or an unknown ``style``.
    """
    if style not in MULTITURN_SYSTEM_PROMPTS:
        raise ValueError(f"unknown multi-turn style {style!r}; expected one of {sorted(MULTITURN_SYSTEM_PROMPTS)}")
    question = _require_str(raw, "question")
    answer = _require_str(raw, "answer")
    truth = gsm8k_ground_truth(answer)
    prompt = f"{question} {MULTITURN_INSTRUCTION}"
    extra_info: dict[str, Any] = {"split": split, "index": index, "answer": answer, "question": question}
    if style == "tool":
        extra_info["need_tools_kwargs"] = True
        extra_info["tools_kwargs"] = {GSM8K_TOOL_NAME: {"create_kwargs": {"ground_truth": truth}}}
    extra_info["interaction_kwargs"] = {"name": "gsm8k", "query": prompt, "ground_truth": truth}
    return {
        "data_source": GSM8K_SOURCE,
        "agent_name": "tool_agent",
        "prompt": [
            {"role": "system", "content": MULTITURN_SYSTEM_PROMPTS[style]},
            {"role": "user", "content": prompt},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": extra_info,
    }


def math500_row(raw: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One MATH-500 record ``{problem, solution, answer, ...}`` -> a verl RL row."""
    problem = _require_str(raw, "problem")
    solution = _require_str(raw, "solution")
    answer = _require_str(raw, "answer")
    return {
        "data_source": MATH500_SOURCE,
        "prompt": [{"role": "user", "content": f"{problem} {MATH_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": solution, "question": problem},
    }


TASKS: dict[str, Callable[[dict[str, Any], int, str], dict[str, Any]]] = {
    "gsm8k": gsm8k_row,
    "math500": math500_row,
}


def convert_file(task: str, path: str | Path, split: str, multiturn: str | None = None) -> list[dict[str, Any]]:
    """Convert every line of a raw jsonl file.

    Args:
        task: ``gsm8k`` or ``math500``.
        path: the raw jsonl file.
        split: value stored in ``extra_info.split``.
        multiturn: None for single-turn rows, else ``tool`` | ``interaction`` (gsm8k only).

    Returns:
        verl RL rows, ``extra_info.index`` = 0-based position among the non-blank lines.

    Raises:
        ValueError: unknown task, ``multiturn`` for a task without a multi-turn form, or a
            malformed line (file and 1-based line number named).
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")
    make_row = TASKS[task]
    if multiturn is not None:
        if task != "gsm8k":
            raise ValueError(f"--multiturn is not supported yet for {task}: only gsm8k has verl's multi-turn schema")
        if multiturn not in MULTITURN_SYSTEM_PROMPTS:
            raise ValueError(
                f"unknown --multiturn style {multiturn!r}; expected one of {sorted(MULTITURN_SYSTEM_PROMPTS)}"
            )
        make_row = lambda raw, index, split: gsm8k_multiturn_row(raw, index, split, multiturn)  # noqa: E731
    rows: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                if not isinstance(raw, dict):
                    raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
                rows.append(make_row(raw, len(rows), split))
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}: line {line_no}: {e}") from e
    return rows


def write_parquet(rows: list[dict[str, Any]], out_path: Path) -> None:
    """Write rows to parquet (parent folders created)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out_path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl prepare", description="raw jsonl -> verl RL parquet")
    p.add_argument("task", choices=sorted(TASKS), help="dataset format of the input")
    p.add_argument("--input", required=True, help="raw jsonl file")
    p.add_argument("--out", required=True, help="output folder; writes <out>/<split>.parquet")
    p.add_argument("--split", choices=["train", "test"], default=None, help="default: the input file's stem")
    p.add_argument(
        "--multiturn",
        nargs="?",
        const="tool",
        default=None,
        choices=sorted(MULTITURN_SYSTEM_PROMPTS),
        help="verl's multi-turn GSM8K schema (agent_name, tools_kwargs, interaction_kwargs); default style: tool",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``verl prepare``; returns the exit status (0 ok, 1 bad input, 2 bad usage)."""
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse exits on --help / bad usage; the CLI contract is a return code
        return int(e.code or 0)
    split = args.split or Path(args.input).stem
    if split not in ("train", "test"):
        print(f"verl prepare: cannot infer the split from {args.input!r}; pass --split train|test", file=sys.stderr)
        return 2
    try:
        rows = convert_file(args.task, args.input, split, multiturn=args.multiturn)
    except (OSError, ValueError) as e:
        print(f"verl prepare: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"verl prepare: {args.input} has no records", file=sys.stderr)
        return 1
    out_path = Path(args.out) / f"{split}.parquet"
    write_parquet(rows, out_path)
    print(f"wrote {len(rows)} rows to {out_path}")
    return 0
