"""GPU check of the ``trainer.device=cuda`` path (run once on a lent GPU machine; CI never has one).

What it measures, each written to ``<out>/gpu_check.json``:

1. The quick start (built-in task and model, 50 GRPO steps) with ``trainer.device=cuda``:
   held-out greedy accuracy at step 0 and at the end, wall time, median step time.
2. The GSM8K shape of issue 14 (random 42M-parameter Qwen2 ``small`` model with the Qwen2.5
   tokenizer, 4 prompts x n=4, 64-token responses) for 6 GRPO steps in float32 and in bfloat16
   parameters: median step time after the first, tokens per second.
3. The log-prob mismatch a bfloat16 forward causes against float32 on the same weights and the
   same 16 sequences (max / mean absolute difference over response tokens).

Usage (device machine, repository root): ``python benchmarks/gpu_check.py --shared DIR --out DIR``
where DIR holds ``tokenizers/qwen2.5`` and ``data/gsm8k/test.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def _median_after_first(history: list[dict], key: str) -> float:
    vals = [h[key] for h in history if key in h][1:]
    return statistics.median(vals) if vals else float("nan")


def quickstart(out: Path) -> dict:
    from verl.commands.train import run

    start = time.perf_counter()
    hist = run(
        "quickstart",
        [
            "trainer.device=cuda",
            f"trainer.output_dir={out}/qs",
            f"trainer.default_local_dir={out}/qs_ckpt",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
        ],
    )
    accs = [h["val/accuracy"] for h in hist if "val/accuracy" in h]
    return {
        "acc_start": accs[0],
        "acc_end": accs[-1],
        "wall_s": time.perf_counter() - start,
        "step_s_median": _median_after_first(hist, "timing_s/step"),
    }


def gsm8k_shape(out: Path, shared: Path, dtype: str) -> dict:
    from verl.data.prepare import main as prepare
    from verl.modules.init_model import init_random_model
    from verl.commands.train import run

    model = out / "qwen2_small"
    if not model.exists():
        init_random_model("qwen2", "small", shared / "tokenizers" / "qwen2.5", model, seed=0)
        prepare(
            [
                "gsm8k",
                "--input",
                str(shared / "data" / "gsm8k" / "test.jsonl"),
                "--out",
                str(out / "gsm8k"),
                "--split",
                "train",
            ]
        )
    hist = run(
        None,
        [
            f"data.train_files=[{out}/gsm8k/train.parquet]",
            "data.train_batch_size=4",
            "data.max_prompt_length=256",
            "data.max_response_length=64",
            "data.filter_overlong_prompts=true",
            f"actor_rollout_ref.model.path={model}",
            f"actor_rollout_ref.model.dtype={dtype}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.ignore_eos=true",
            "algorithm.adv_estimator=grpo",
            "trainer.total_training_steps=6",
            "trainer.device=cuda",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
            f"trainer.output_dir={out}/gsm_{dtype}",
            f"trainer.default_local_dir={out}/gsm_{dtype}_ckpt",
            "trainer.save_freq=-1",
        ],
    )
    step = _median_after_first(hist, "timing_s/step")
    tokens = statistics.median([h.get("perf/total_num_tokens", float("nan")) for h in hist[1:]])
    keys = [k for k in hist[-1] if k.startswith(("timing_s/", "perf/"))]
    return {
        "step_s_median": step,
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / step,
        "last_step": {k: hist[-1][k] for k in keys},
    }


def logprob_mismatch(out: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from verl.modules.forward import compute_log_probs, position_ids_from_attention_mask

    model = AutoModelForCausalLM.from_pretrained(out / "qwen2_small", torch_dtype=torch.float32).cuda().eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 50_000, (16, 128), generator=g).cuda()
    mask = torch.ones_like(ids)
    pos = position_ids_from_attention_mask(mask)
    with torch.no_grad():
        lp32 = compute_log_probs(model, ids, mask, pos, 64)
        lp16 = compute_log_probs(model.to(torch.bfloat16), ids, mask, pos, 64)
    d = (lp32 - lp16.float()).abs()
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out, shared = Path(args.out), Path(args.shared)
    import torch

    record: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, fn in [
        ("quickstart", lambda: quickstart(out)),
        ("gsm8k_fp32", lambda: gsm8k_shape(out, shared, "float32")),
        ("gsm8k_bf16", lambda: gsm8k_shape(out, shared, "bfloat16")),
        ("bf16_logprob_mismatch", lambda: logprob_mismatch(out)),
    ]:
        try:
            record[name] = fn()
        except Exception as e:  # one failing part must not hide the others' figures
            import traceback

            traceback.print_exc()
            record[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(record[name], default=str), flush=True)
    Path(args.out, "gpu_check.json").write_text(json.dumps(record, indent=2, default=str))


if __name__ == "__main__":
    main()
