"""SFT step time and peak memory: full `(B, T, V)` logits vs loss tokens only, padded vs packed.

Three arms, each in its own process (peak RSS is per process), alternated round by round:

* ``full-logits``: the supervised forward before this change (the model's logits at every
  position, a float32 log-softmax over `(B, T − 1, V)`, gathered at the tokens);
* ``padded``: `verl.modules.forward.compute_token_log_probs`, LM head on the loss tokens only;
* ``packed``: the same with ``use_remove_padding=true`` (real tokens packed into rows).

Setup: a random Qwen2 model of ``--size`` (verl init-model sizes; ``small`` = 42M parameters with
the Qwen2.5 151,936-token vocabulary), GSM8K question -> worked solution (``data.max_length``
512, so each row keeps its own length), ``--batch`` sequences per step in one micro-batch,
float32, AdamW. Prints per arm the median ``timing_s/step`` of the steps after the first and the
process's peak RSS.

    python benchmarks/bench_sft_packing.py --shared ../shared [--steps 6] [--rounds 2] [--size small] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARMS = ("full-logits", "padded", "packed")


def _full_logits(module, input_ids, attention_mask, position_ids, loss_mask, remove_padding=False):
    """The supervised forward before the change: every position's logits, then the log-softmax."""
    from verl.algorithms.logprob import logprobs_and_entropy_from_logits

    logits = module(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).logits
    return logprobs_and_entropy_from_logits(logits[:, :-1], input_ids[:, 1:], compute_entropy=False)[0]


def run_arm(arm: str, model: str, data: str, steps: int, batch: int, work: str) -> dict:
    import torch

    import verl.trainer.supervised.streams as hs
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.supervised.builders import build_supervised_trainer

    if arm == "full-logits":
        hs.token_log_probs = _full_logits
    cfg = load_sft_config(
        None,
        [
            f"model.partial_pretrain={model}",
            f"data.train_files={data}",
            "data.max_length=512",
            "data.truncation=right",
            f"data.train_batch_size={batch}",
            f"data.micro_batch_size_per_gpu={batch}",
            f"trainer.total_training_steps={steps}",
            f"use_remove_padding={str(arm == 'packed').lower()}",
            "trainer.logger=[]",
            f"trainer.default_local_dir={work}/ckpt",
            f"trainer.output_dir={work}/out",
        ],
    )
    trainer = build_supervised_trainer(cfg)
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times, losses, tokens = [], [], []
    for step in range(1, steps + 1):
        b = trainer.streams[0].batch(step, 0, 1).batch
        tokens.append(int(b["attention_mask"].sum()))
        m = trainer.train_step(step)
        times.append(m["timing_s/step"])
        losses.append(m["train/loss"])
    return {
        "arm": arm,
        "step_s": statistics.median(times[1:]),
        "times": times,
        "losses": losses,
        "real_tokens": tokens,
        "padded_tokens": batch * int(b["attention_mask"].shape[1]),
        "rss_before_MiB": rss_start,
        "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }


def parse_args(doc: str, arms: tuple[str, ...]) -> argparse.Namespace:
    """The options shared by the SFT benches (``--arm`` / ``--model``: one arm in a child process)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default=None, help="write the JSON record here")
    ap.add_argument("--arm", choices=arms, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    return ap.parse_args()


def run_rounds(script: str, arms: tuple[str, ...], args: argparse.Namespace) -> dict[str, list[dict]]:
    """Each arm in a child process of ``script``, arms alternated for ``args.rounds`` rounds, on one
    random Qwen2 of ``args.size``; returns the JSON records per arm and prints a line per run."""
    from verl.modules.init_model import init_random_model

    shared = Path(args.shared)
    results: dict[str, list[dict]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory() as tmp:
        model = init_random_model("qwen2", args.size, shared / "tokenizers" / "qwen2.5", Path(tmp) / "model", seed=0)
        for r in range(args.rounds):
            for arm in arms:
                proc = subprocess.run(
                    [
                        sys.executable,
                        script,
                        "--arm",
                        arm,
                        "--model",
                        str(model),
                        "--shared",
                        str(shared),
                        "--steps",
                        str(args.steps),
                        "--batch",
                        str(args.batch),
                    ],
                    capture_output=True,
                    text=True,
                )
                if proc.returncode:
                    raise SystemExit(f"{arm} failed:\n{proc.stderr[-3000:]}")
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                results[arm].append(res)
                print(
                    f"round {r + 1} {arm:12s} step {res['step_s']:.3f} s  peak RSS {res['peak_rss_MiB']:.0f} MiB "
                    f"(before training {res['rss_before_MiB']:.0f})  losses {[round(x, 4) for x in res['losses'][:3]]}",
                    flush=True,
                )
    return results


def summarize(results: dict[str, list[dict]], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Medians per arm (step time, peak RSS, RSS growth while training), printed as a table; JSON to ``args.out``."""
    summary = {
        a: {
            "step_s": statistics.median(x["step_s"] for x in v),
            "peak_rss_MiB": statistics.median(x["peak_rss_MiB"] for x in v),
            "growth_MiB": statistics.median(x["peak_rss_MiB"] - x["rss_before_MiB"] for x in v),
        }
        for a, v in results.items()
    }
    print("\n| arm | median step s | peak RSS MiB | RSS growth while training MiB |\n|---|---|---|---|")
    for a, s in summary.items():
        print(f"| {a} | {s['step_s']:.3f} | {s['peak_rss_MiB']:.0f} | {s['growth_MiB']:.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "runs": results, "args": vars(args)}, indent=1))
    return summary


def main() -> None:
    args = parse_args(__doc__, ARMS)
    if args.arm:  # one arm in this process
        with tempfile.TemporaryDirectory() as work:
            data = str(Path(args.shared) / "data" / "gsm8k" / "train.jsonl")
            print(json.dumps(run_arm(args.arm, args.model, data, args.steps, args.batch, work)))
        return
    results = run_rounds(__file__, ARMS, args)
    first = results["padded"][0]
    print(f"\nreal tokens per step {statistics.mean(first['real_tokens']):.0f} of {first['padded_tokens']} padded")
    summary = summarize(results, args)
    base = summary["full-logits"]["step_s"]
    print(
        f"speed-up vs full-logits: padded {base / summary['padded']['step_s']:.2f}x, "
        f"packed {base / summary['packed']['step_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
