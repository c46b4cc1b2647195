"""Writing generations: ``trainer.rollout_data_dir``, ``trainer.validation_data_dir``,
``trainer.log_val_generations`` (verl's names and file layout).

Each dump is ``<dir>/<global_step>.jsonl``, one JSON object per trajectory with ``input``
(prompt text), ``output`` (response text), ``score`` (sequence score), ``step`` and, when known,
``gts`` (ground truth) and every per-sample value the reward manager reported.

``log_val_generations = N`` logs N validation samples per validation: the samples are sorted
by input, shuffled with ``RandomState(42)`` (the same N prompts every time, as in verl) and the
first N are printed and appended to ``<trainer.output_dir>/val_generations.jsonl``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["decode_io", "dump_generations", "pick_val_generations"]

logger = logging.getLogger(__name__)


def decode_io(batch: Any, tokenizer: Any) -> tuple[list[str], list[str]]:
    """Prompt and response texts of a rolled-out batch (valid tokens only, special tokens kept out)."""
    b = batch.batch
    prompts, responses = b["prompts"], b["responses"]
    prompt_mask = b["attention_mask"][:, : prompts.shape[-1]].bool()
    inputs = [tokenizer.decode(prompts[i][prompt_mask[i]], skip_special_tokens=True) for i in range(len(batch))]
    outputs = [tokenizer.decode(responses[i][b["response_mask"][i].bool()], skip_special_tokens=True) for i in range(len(batch))]
    return inputs, outputs


def _plain(value: Any) -> Any:
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def dump_generations(directory: str | Path, step: int, inputs: Sequence[str], outputs: Sequence[str],
                     scores: Sequence[float], extra: dict[str, Sequence[Any]] | None = None,
                     gts: Sequence[Any] | None = None) -> Path:
    """Writes ``<directory>/<step>.jsonl`` (module docstring); returns its path."""
    out = Path(directory) / f"{step}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = extra or {}
    with out.open("w", encoding="utf-8") as f:
        for i, (inp, outp, score) in enumerate(zip(inputs, outputs, scores, strict=True)):
            row: dict[str, Any] = {"input": inp, "output": outp, "score": float(score), "step": step}
            if gts is not None:
                row["gts"] = _plain(gts[i])
            for key, values in extra.items():
                if len(values) == len(inputs):
                    row[key] = _plain(values[i])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out


def pick_val_generations(inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float], n: int) -> list[tuple[str, str, float]]:
    """N (input, output, score) samples: sorted by input, shuffled with RandomState(42), first N."""
    samples = sorted(zip(inputs, outputs, (float(s) for s in scores)), key=lambda x: x[0])
    order = np.arange(len(samples))
    np.random.RandomState(42).shuffle(order)
    return [samples[i] for i in order[:n]]


def log_val_generations(samples: list[tuple[str, str, float]], step: int, output_dir: str | Path) -> None:
    """Prints the samples and appends them to ``<output_dir>/val_generations.jsonl``."""
    path = Path(output_dir) / "val_generations.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for inp, outp, score in samples:
            f.write(json.dumps({"step": step, "input": inp, "output": outp, "score": score}, ensure_ascii=False) + "\n")
    for inp, outp, score in samples:
        print(f"[val generation step {step}] score={score:.3g}\n  input: {inp!r}\n  output: {outp!r}", flush=True)
