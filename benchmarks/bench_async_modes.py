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

Each run also records ``cores_used`` (the run process's CPU seconds, user + system, over its wall
time, start-up included: about 1 for a synchronous run on a free machine, up to 2 for
``separate_async``) and, for ``separate_async``, the medians of its threads' ``cpu_s`` and
``runq_ratio`` (`verl.trainer.async_rl.thread_clock`): the overlap can only pay where each
thread finds a free core. The record is rewritten after every run, so an interrupted
benchmark keeps its finished runs; ``--max-minutes`` starts no round after that time.

Usage::

    python benchmarks/bench_async_modes.py --rounds 2 --steps 3 --out benchmarks/bench_async_modes.json
    python benchmarks/bench_async_modes.py --rounds 6 --steps 4 --max-minutes 15 --out F.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
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
    cmd = [
        sys.executable,
        "-m",
        "verl.cli",
        "bench",
        "--shape",
        SHAPE[0],
        "--steps",
        str(steps),
        "--work-dir",
        str(work_dir),
        "--out",
        str(out),
        *MODES[name],
        *extra,
    ]
    load0 = os.getloadavg()[0]
    usage0, wall0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    usage1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - wall0
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
    record = json.loads(out.read_text())
    out.unlink()
    measured = record["metrics"][1:]
    keys = [f"{who}/{what}" for who in ("trainer", "rollouter") for what in ("idle_ratio", "cpu_s", "runq_ratio")]
    idle = {k: statistics.median(m[k] for m in measured) for k in keys if all(k in m for m in measured)}
    return {
        "mode": name,
        "throughput": record["summary"]["throughput"],
        "step_s": record["summary"]["step_s"],
        "loadavg_start": load0,
        "loadavg_end": os.getloadavg()[0],
        **idle,
        "run_wall_s": wall,
        "run_cpu_s": cpu,
        "cores_used": cpu / wall,
        "steps_s": [s["seconds"] for s in record["steps_detail"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="steps per run (the first is warm-up)")
    parser.add_argument("--work-dir", default="/tmp/verl-bench-async")
    parser.add_argument("--out", default=None)
    parser.add_argument("--shape", default="gsm8k", choices=("gsm8k", "builtin"))
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads per process (and per "
        "thread of separate_async): 1 = one core for training, one for generation",
    )
    parser.add_argument("--max-minutes", type=float, default=None, help="start no round after this many minutes")
    parser.add_argument("extra", nargs="*", help="overrides for every run")
    ns = parser.parse_args()
    SHAPE[0] = ns.shape
    work = Path(ns.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    result = summarize(runs, ns)
    start = time.perf_counter()
    for r in range(ns.rounds):
        if ns.max_minutes is not None and time.perf_counter() - start > 60 * ns.max_minutes:
            print(f"--max-minutes {ns.max_minutes}: stopping after {r} rounds", flush=True)
            break
        for name in MODES:
            runs.append({"round": r, **run_one(name, ns.steps, work, ["--threads", str(ns.threads), *ns.extra])})
            print(json.dumps(runs[-1]), flush=True)
            result = summarize(runs, ns)
            if ns.out:
                Path(ns.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


def summarize(runs: list[dict], ns: argparse.Namespace) -> dict:
    """The record: the runs, the median throughput of each mode so far, their ratios and the
    per-round ratios (rounds with all three modes)."""
    med = {
        name: statistics.median(x["throughput"] for x in runs if x["mode"] == name)
        for name in MODES
        if any(x["mode"] == name for x in runs)
    }
    by_round: dict[int, dict[str, float]] = {}
    for x in runs:
        by_round.setdefault(x["round"], {})[x["mode"]] = x["throughput"]
    per_round = [
        {
            "round": r,
            "async_vs_split": v["separate_async"] / v["split"],
            "async_vs_colocated": v["separate_async"] / v["colocated"],
        }
        for r, v in sorted(by_round.items())
        if len(v) == len(MODES)
    ]
    result = {
        "runs": runs,
        "median_throughput": med,
        "per_round": per_round,
        "cpus": os.cpu_count(),
        "steps": ns.steps,
        "rounds": len(by_round),
        "shape": ns.shape,
        "threads": ns.threads,
        "extra": ns.extra,
    }
    if len(med) == len(MODES):
        result["ratio_async_vs_split"] = med["separate_async"] / med["split"]
        result["ratio_async_vs_colocated"] = med["separate_async"] / med["colocated"]
    return result


if __name__ == "__main__":
    sys.exit(main())
