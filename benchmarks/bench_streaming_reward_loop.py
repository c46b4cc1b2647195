"""Streaming rewards inside real RL runs: the share of a slow reward's time the loop hides.

Each run is ``verl bench --shape gsm8k`` (random 42M Qwen2 ``small``, 4 GSM8K prompts x n=4 = 16
trajectories, exactly 64-token responses, float32, ``hf`` engine) with a custom reward function
that sleeps 50 ms per sample and then applies the GSM8K rule (16 x 50 ms = 0.8 s per batch when
scored one after another), in ``sync`` and ``separate_async`` mode, with
``reward_model.streaming`` false then true (alternated per round, the same seeds).

What is measured, per step after the first (warm-up), medians:

* ``sync``: ``timing_s/reward``, the reward stage of the step: scoring after generation (off) or
  the wait for the last streamed scores after the generation call returned (on).
* ``separate_async``: ``timing_s/rollouter_reward``, from the end of a generation call to its
  groups being put into the replay buffer: off, the rollout thread scores them (and only then
  starts the next call); on, the wait for the last streamed scores, in a finisher thread while
  the next call already generates.

hidden share = 1 - on / off. Measured on this tail, not on step walls: on this shared 2-core
machine a step's own run-to-run noise (seconds) is larger than the 0.8 s of reward.

Usage::

    python benchmarks/bench_streaming_reward_loop.py --rounds 1 --steps 3 \
        --out benchmarks/bench_streaming_reward_loop.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SLEEP_S = 0.05
SLOW_REWARD = f"""
import time
from verl.reward import default_compute_score

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep({SLEEP_S})  # a verifier round trip
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)
"""
TAIL_KEY = {"sync": "timing_s/reward", "separate_async": "timing_s/rollouter_reward"}


def one_run(mode: str, streaming: bool, steps: int, work_dir: Path, extra: list[str]) -> dict[str, Any]:
    """One ``verl bench --shape gsm8k`` run; returns its per-step tails and walls."""
    from verl.commands.bench.bench import main as bench_main

    reward = work_dir / "slow_reward.py"
    reward.write_text(SLOW_REWARD)
    out = work_dir / f"{mode}-{'on' if streaming else 'off'}.json"
    load = os.getloadavg()[0]
    start = time.perf_counter()
    argv = [
        "--shape",
        "gsm8k",
        "--steps",
        str(steps),
        "--mode",
        mode,
        "--work-dir",
        str(work_dir),
        "--out",
        str(out),
        f"custom_reward_function.path={reward}",
        f"reward_model.streaming={str(streaming).lower()}",
        "reward_model.timeout_s=5",
        *extra,
    ]
    if bench_main(argv) != 0:
        raise RuntimeError(f"verl bench {' '.join(argv)} failed")
    record = json.loads(out.read_text())
    metrics = record["metrics"][1:]  # the first step warms up
    return {
        "tails_s": [m[TAIL_KEY[mode]] for m in metrics],
        "steps_s": [m["timing_s/step"] for m in metrics],
        "gen_s": [m.get("timing_s/gen", float("nan")) for m in metrics],
        "wall_s": time.perf_counter() - start,
        "loadavg_start": load,
        "loadavg_end": os.getloadavg()[0],
        "command": "verl bench " + " ".join(argv),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="steps per run (the first is warm-up)")
    parser.add_argument("--modes", default="sync,separate_async")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides of every run")
    args = parser.parse_args()
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="verl-bench-stream-loop-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    summary: dict[str, dict[str, float]] = {}
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            for streaming in (False, True):
                key = f"{mode}/{'on' if streaming else 'off'}"
                runs.setdefault(key, []).append(one_run(mode, streaming, args.steps, work_dir, args.overrides))
                print(
                    f"round {r} {key}: tails {runs[key][-1]['tails_s']} s, steps {runs[key][-1]['steps_s']} s",
                    flush=True,
                )
            tails = {s: [t for run in runs.get(f"{mode}/{s}", []) for t in run["tails_s"]] for s in ("off", "on")}
            if tails["off"] and tails["on"]:
                off, on = statistics.median(tails["off"]), statistics.median(tails["on"])
                summary[mode] = {"reward_off_s": off, "tail_on_s": on, "hidden_share": 1.0 - on / off}
                print(
                    f"{mode}: reward after generation {off:.3f} s, streaming tail {on:.3f} s -> hidden "
                    f"{100 * (1 - on / off):.1f} %",
                    flush=True,
                )
            if args.out:  # written after every mode: a killed run keeps what it measured
                Path(args.out).write_text(
                    json.dumps(
                        {
                            "setup": {"sleep_s": SLEEP_S, "steps": args.steps, "overrides": args.overrides},
                            "runs": runs,
                            "median": summary,
                        },
                        indent=1,
                    )
                    + "\n"
                )
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
