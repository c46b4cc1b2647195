"""Fixtures of the multi-turn end-to-end tests: GSM8K in verl's multi-turn schema and a random
Qwen2 model (Qwen2.5 tokenizer) whose turns end and open tool calls now and then."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

IM_END, TOOL_CALL, TOOL_CALL_END = 151645, 151657, 151658


def boosted_random_qwen(shared_dir: Path, out: Path, logit: float = 9.0) -> Path:
    """``verl init-model`` tiny Qwen2, then the rows of <|im_end|>, <tool_call>, </tool_call> are
    set along the mean final hidden state so each gets a logit of about ``logit``: a random
    model otherwise never stops a turn (1 in 151,936) and never writes a tool call, and the
    multi-turn machinery (turns, malformed calls, tool errors, user turns) would go unexercised."""
    from transformers import AutoModelForCausalLM

    from verl.modules.init_model import main as init_model_main

    assert (
        init_model_main(
            [
                "--arch",
                "qwen2",
                "--size",
                "tiny",
                "--tokenizer",
                str(shared_dir / "tokenizers" / "qwen2.5"),
                "--out",
                str(out),
                "--force",
            ]
        )
        == 0
    )
    model = AutoModelForCausalLM.from_pretrained(out)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        h = model.model(input_ids=torch.randint(0, 150000, (4, 64), generator=g)).last_hidden_state
        mean = h.reshape(-1, h.shape[-1]).mean(0)
        head = model.get_output_embeddings().weight
        for token in (IM_END, TOOL_CALL, TOOL_CALL_END):
            head[token] = mean * (logit / float(mean @ mean))
    model.save_pretrained(out)
    return out


def finite_metrics(history: list[dict[str, Any]]) -> None:
    """Every float metric of every step is finite."""
    for h in history:
        bad = {k: v for k, v in h.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
