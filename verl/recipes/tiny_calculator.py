"""Recipe of ``tiny-calculator``, the multi-turn ``calculator`` task's built-in model
(`verl.modules.builtin.ToolModelSpec`).

Tokenizer: `verl.data.builtin_tokenizer` (character tokenizer + ``<tool_call>`` /
``</tool_call>`` / ``<tool_response>`` / ``</tool_response>`` + a tool-aware chat template).

Warm start (`build_tool_model`): a 2-layer, hidden-64 Llama with 2 attention heads of size 32
(seed 0; head size 32 because vLLM's CPU attention refuses 16, so both rollout engines run it),
trained with the product's own SFT trainer (`verl.commands.sft.train_sft`, multi-turn
rows: the loss covers exactly the assistant turns) on the teacher's conversations for the
*train* split of `verl.data.builtin_tool_task`. The teacher calls the calculator with
probability ``teacher_tool_prob_even`` (0.85) when the first operand is even and
``teacher_tool_prob_odd`` (0.15) when it is odd, and answers from memory otherwise (the true
product, which a 0.1 M-parameter model cannot learn to compute). Decoding greedily, the student
thus calls the tool on about half of the held-out problems and guesses (wrongly) on the rest, yet
still samples the tool there now and then: RL with the exact-answer reward has a signal to
amplify — calling the tool on every problem. ``verl_builtin.json`` in the directory records the
held-out greedy accuracy and tool-call rate (`tool_accuracy`), and the torch version and CPU
capability that made it: the build is deterministic (seeded, one intra-op thread), so the same
torch on the same CPU kind rebuilds the same bytes.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from verl.data.builtin_tokenizer import build_tool_tokenizer
from verl.modules.builtin import INFO_FILE, ToolModelSpec
from verl.recipes.warm_start import warm_start

__all__ = [
    "MULTITURN_KEYS",
    "build_tool_model",
    "calculator_schema",
    "teacher_conversation",
    "teacher_rows",
    "tool_accuracy",
]


def calculator_schema() -> dict[str, Any]:
    """The schema of the built-in calculator tool (what the task's tool config loads)."""
    from verl.tools.calculator import DEFAULT_SCHEMA

    return DEFAULT_SCHEMA


def teacher_conversation(a: int, b: int, use_tool: bool) -> list[dict[str, Any]]:
    """The teacher's conversation for ``a*b``: with a calculator call, or a direct answer."""
    answer = str(a * b)
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{a}*{b}"}]
    if use_tool:
        call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": answer}]
    return messages + [{"role": "assistant", "content": answer}]


MULTITURN_KEYS = (
    "data.multiturn.enable=true",
    "data.multiturn.messages_key=messages",
    "data.multiturn.tools_key=tools",
)
# How ``verl sft`` reads `teacher_rows`: chat conversations with tool schemas.


def teacher_rows(spec: ToolModelSpec) -> list[dict[str, Any]]:
    """``{messages, tools}`` for every train problem: the teacher's conversation (tool or not, drawn per problem)."""
    from verl.data.builtin_tool_task import multiplication_problems

    rng = random.Random(spec.sft_seed)
    tools = [calculator_schema()]
    rows = []
    for a, b in multiplication_problems("train"):
        p_tool = spec.teacher_tool_prob_even if a % 2 == 0 else spec.teacher_tool_prob_odd
        rows.append({"messages": teacher_conversation(a, b, rng.random() < p_tool), "tools": tools})
    return rows


def _generate(model: Any, tok: Any, seqs: list[list[int]], do_sample: bool, max_new_tokens: int) -> list[list[int]]:
    """Left-padded batched generation; returns each continuation up to and including EOS."""
    import torch

    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
        mask[i, width - len(s) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    result = []
    for row in out[:, width:].tolist():
        result.append(row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row)
    return result


def tool_accuracy(
    model: Any, tok: Any, split: str = "test", do_sample: bool = False, limit: int | None = None
) -> dict[str, float]:
    """Held-out accuracy of the model *with* the calculator, over up to two assistant turns.

    Turn 1 is generated from the prompt; its Hermes tool calls are parsed and run with the real
    `CalculatorTool`; the tool turn and ``A:`` are appended and turn 2 is generated. The answer
    is scored with `verl.reward.scorers.tool_answer` (tool blocks do not count).

    Returns:
        ``{"accuracy", "tool_call_rate"}`` (shares of the problems).
    """
    from verl.data.builtin_tool_task import multiplication_problems
    from verl.reward.scorers.tool_answer import compute_score
    from verl.tools import ToolSession, parse_tool_calls
    from verl.tools.calculator import CalculatorTool

    problems = multiplication_problems(split)[:limit]
    tools = {"calculator": CalculatorTool({})}
    prompts = [
        tok(
            tok.apply_chat_template(
                [{"role": "user", "content": f"{a}*{b}"}],
                tools=[calculator_schema()],
                add_generation_prompt=True,
                tokenize=False,
            ),
            add_special_tokens=False,
        )["input_ids"]
        for a, b in problems
    ]
    first = _generate(model, tok, prompts, do_sample, max_new_tokens=80)
    texts = [tok.decode(g, skip_special_tokens=True) for g in first]
    calls = [parse_tool_calls(t, tools, 1)[1] for t in texts]

    async def run_calls() -> list[str]:
        return [(await ToolSession(tools).call(c[0])).response.text if c else "" for c in calls]

    answers = asyncio.run(run_calls())
    todo = [i for i, c in enumerate(calls) if c]
    if todo:
        follow = [
            prompts[i]
            + first[i]
            + tok(f"<tool_response>{answers[i]}</tool_response>A:", add_special_tokens=False)["input_ids"]
            for i in todo
        ]
        for i, gen in zip(todo, _generate(model, tok, follow, do_sample, max_new_tokens=12)):
            texts[i] += f"<tool_response>{answers[i]}</tool_response>A:" + tok.decode(gen, skip_special_tokens=True)
    scores = [compute_score(t, str(a * b)) for t, (a, b) in zip(texts, problems)]
    return {"accuracy": sum(scores) / len(scores), "tool_call_rate": len(todo) / len(problems)}


def build_tool_model(out_dir: str | Path, spec: ToolModelSpec | None = None) -> Path:
    """Builds ``tiny-calculator``: init, warm start, save (model, tokenizer, info); deterministic.

    The warm start is a multi-turn ``verl sft`` run (`verl.commands.sft.train_sft`, the
    same path as ``tiny-arithmetic``'s) of the spec's recipe on `teacher_rows`. Runs with one
    intra-op thread (the thread count changes float reduction order); a few minutes on a CPU core.

    Args:
        out_dir: Directory to write (created; existing files are overwritten).
        spec: Recipe; defaults to ``ToolModelSpec()``.

    Returns:
        ``out_dir``, holding ``config.json``, ``model.safetensors``, the tokenizer files and
        ``verl_builtin.json`` (spec, build version, final SFT loss, held-out greedy accuracy and tool-call rate,
        and the torch version and CPU capability that made it).
    """
    import torch

    spec = spec or ToolModelSpec()
    out = Path(out_dir)
    tok = build_tool_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="verl-calculator-sft-") as work:
            model, last_loss = warm_start(spec, tok, Path(work), teacher_rows(spec), MULTITURN_KEYS)
        greedy = tool_accuracy(model, tok)
    finally:
        torch.set_num_threads(threads)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    info = {
        "spec": asdict(spec),
        "build_version": spec.build_version,
        "final_sft_loss": round(last_loss, 4),
        "sft_path": "verl.trainer.sft_trainer",
        "test_greedy_accuracy": greedy["accuracy"],
        "test_greedy_tool_call_rate": greedy["tool_call_rate"],
        # Same torch and CPU kind -> same bytes (the slow rebuild test relies on it).
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out
