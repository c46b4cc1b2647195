"""bf16 vs fp32 on CPU (issue 14): speed of the training log-prob forward + backward and of one
decode step, and the log-prob mismatch bf16 causes, on the GSM8K bench shape.

Same random weights in both dtypes (the bf16 model is the fp32 one cast), 16 sequences of
40 prompt + 64 response tokens, packed forward (verl's default). Timings alternate fp32 / bf16
``--repeats`` times and report medians, so load on a shared machine hits both alike.

Usage: ``python benchmarks/bench_bf16_cpu.py --model DIR [--repeats 3]`` (DIR: ``verl init-model
--arch qwen2 --size small --tokenizer <qwen2.5 tokenizer>``; ``verl bench --shape gsm8k
--work-dir W`` leaves one in ``W/qwen2-small``).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from verl.modules.forward import compute_log_probs_and_entropy
from verl.workers.rollout.hf.hf_rollout import cache_keyword


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    fp32 = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    models = {"float32": fp32, "bfloat16": copy.deepcopy(fp32).to(torch.bfloat16)}
    b, p, r = 16, 40, 64
    ids = torch.randint(0, fp32.config.vocab_size - 1000, (b, p + r))
    mask = torch.ones_like(ids)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logps = {}

    def train_step(model: torch.nn.Module) -> None:
        lp, _ = compute_log_probs_and_entropy(model, ids, mask, pos, r, compute_entropy=False, remove_padding=True)
        lp.sum().backward()
        model.zero_grad(set_to_none=True)

    def decode_step(model: torch.nn.Module) -> None:
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            model(
                input_ids=ids[:, :p],
                position_ids=pos[:, :p],
                use_cache=True,
                **{cache_keyword(model): cache},
                logits_to_keep=1,
            )
            for t in range(8):
                model(
                    input_ids=ids[:, p + t : p + t + 1],
                    position_ids=pos[:, p + t : p + t + 1],
                    use_cache=True,
                    **{cache_keyword(model): cache},
                )

    times: dict[str, dict[str, list[float]]] = {k: {"train": [], "decode8": []} for k in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            times[name]["train"].append(_timed(lambda m=model: train_step(m)))
            times[name]["decode8"].append(_timed(lambda m=model: decode_step(m)))
    with torch.no_grad():
        for name, model in models.items():
            logps[name], _ = compute_log_probs_and_entropy(
                model, ids, mask, pos, r, compute_entropy=False, remove_padding=True
            )
    diff = (logps["float32"] - logps["bfloat16"]).abs()
    out = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    out["logprob_abs_diff"] = {"max": float(diff.max()), "mean": float(diff.mean())}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
