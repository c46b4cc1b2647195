"""Tokens/s of ``separate_async`` vs the synchronous split-pool run vs the colocated synchronous run.

Each configuration runs as its own ``verl bench --shape gsm8k`` process (42M Qwen2-shape random
model, 151,936-token vocabulary, 4 prompts x n=4, 64-token responses), and the three alternate
in rounds (A B C A B C ...), so machine-load drift hits all of them alike. A run's figure is
``verl bench``'s median step throughput over its steps after the first (warm-up); the ratios
compare the medians of those figures over the rounds.

* ``colocated``: ``hybrid_engine=true`` (the rollout generates with the actor module), sync.
* ``split``: ``hybrid_engine=false`` (rollout worker with its own weights, bucketed sync), sync.
* ``separate_async``: the split pool with ``trainer.v1.trainer_mode=separate_async``, one
  warm-up batch, one sync per step: generation of step k+1 overlaps training of step k.

Usage::

    python benchmarks/bench_async_modes.py --rounds 2 --steps 3 --out benchmarks/bench_async_modes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPE = ["gsm8k"]  # --shape (builtin for a quick check)
MODES = {
    "colocated": [],
    "split": ["actor_rollout_ref.hybrid_engine=false"],
    "separate_async": ["--mode", "separate_async"],
}


def run_one(name: str, steps: int, work_dir: Path, extra: list[str]) -> dict:
    """One ``verl bench`` process of configuration ``name``; returns its figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, "-m", "verl.cli", "bench", "--shape", SHAPE[0], "--steps", str(steps),
           "--work-dir", str(work_dir), "--out", str(out), *MODES[name], *extra]
    load0 = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
    record = json.loads(out.read_text())
    out.unlink()
    measured = record["metrics"][1:]
    idle = {k: statistics.median(m[k] for m in measured) for k in ("trainer/idle_ratio", "rollouter/idle_ratio")
            if all(k in m for m in measured)}
    return {"mode": name, "throughput": record["summary"]["throughput"], "step_s": record["summary"]["step_s"],
            "loadavg_start": load0, "loadavg_end": os.getloadavg()[0], **idle,
            "steps_s": [s["seconds"] for s in record["steps_detail"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="steps per run (the first is warm-up)")
    parser.add_argument("--work-dir", default="/tmp/verl-bench-async")
    parser.add_argument("--out", default=None)
    parser.add_argument("--shape", default="gsm8k", choices=("gsm8k", "builtin"))
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process (and per "
                        "thread of separate_async): 1 = one core for training, one for generation")
    parser.add_argument("extra", nargs="*", help="overrides for every run")
    ns = parser.parse_args()
    SHAPE[0] = ns.shape
    work = Path(ns.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for r in range(ns.rounds):
        for name in MODES:
            runs.append({"round": r, **run_one(name, ns.steps, work, ["--threads", str(ns.threads), *ns.extra])})
            print(json.dumps(runs[-1]), flush=True)
    med = {name: statistics.median(x["throughput"] for x in runs if x["mode"] == name) for name in MODES}
    result = {"runs": runs, "median_throughput": med,
              "ratio_async_vs_split": med["separate_async"] / med["split"],
              "ratio_async_vs_colocated": med["separate_async"] / med["colocated"],
              "cpus": os.cpu_count(), "steps": ns.steps, "rounds": ns.rounds, "shape": ns.shape, "threads": ns.threads}
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    if ns.out:
        Path(ns.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
