"""Decode LM-head layout of the ``hf`` engine (`verl.workers.rollout.hf.decode_head`), A/B in one process.

Runs GSM8K-shape GRPO steps (``verl bench --shape gsm8k``: random 42M Qwen2, 4 prompts x n = 4,
64-token responses, fp32) and alternates, step by step, the decode step's LM head between
``F.linear`` (forced) and the layout `decode_head` measured faster here; prints each step's
``timing_s/gen`` and the medians per arm, and which layout the measurement chose.

Usage: ``VERL_SHARED_DIR=../shared python benchmarks/bench_decode_head.py [--steps 10] [--work-dir W]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from verl.commands.bench import bench
from verl.commands.bench.bench import VerlStepper
from verl.workers.rollout.hf import decode_head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="alternated steps after one warm-up step")
    parser.add_argument("--work-dir", default=None, help="cache for the random model and parquet")
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="verl-bench-head-"))
    cfg, _, _ = bench._load(bench._parse(["--shape", "gsm8k", "--work-dir", str(work)]), work)
    stepper = VerlStepper(cfg)
    measured = decode_head.weight_major_is_faster
    stepper.step()  # warm-up (the layout is measured here)
    gen: dict[str, list[float]] = {"linear": [], "measured": []}
    for i in range(args.steps):
        arm = "measured" if i % 2 else "linear"
        decode_head.weight_major_is_faster = measured if arm == "measured" else (lambda weight, rows: False)
        record = stepper.step()
        gen[arm].append(record.stages["gen"])
        print(f"step {i + 2} {arm:8s} gen {record.stages['gen']:.3f} s, step {record.seconds:.3f} s", flush=True)
    decode_head.weight_major_is_faster = measured
    print("layout chosen per (V, H, rows, dtype): weight-major =", dict(decode_head._WEIGHT_MAJOR))
    print({arm: round(statistics.median(v), 3) for arm, v in gen.items()}, "median timing_s/gen")
    stepper.close()


if __name__ == "__main__":
    main()
