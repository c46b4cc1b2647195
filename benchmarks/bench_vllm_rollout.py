"""Quick start with ``rollout.name=hf`` vs ``rollout.name=vllm`` (CPU build): learning and rollout speed.

Runs the built-in quick start (GRPO, two-digit addition, 32 prompts x 8 samples per step) once per
engine, each in its own process, alternating ``--repeats`` times, and reports per engine:

- held-out greedy accuracy before and after (``val/accuracy``, points gained);
- the rollout stage: median ``timing_s/gen`` over the steps after the first (the first includes
  vLLM's warm-up), including vLLM's weight sync (``timing_s/update_weights``, also reported);
- the step time (``timing_s/step``), and the ratio hf / vllm of the rollout stage.

The default model is the shipped built-in one (``builtin://tiny-arithmetic``, head size 32:
vLLM's CPU attention refuses head size 16, the reason the built-in model has 2 heads of 32);
``--model`` takes any other Hugging Face directory. The machine's load (``os.getloadavg``) is
recorded before each run, because the figures are only comparable on a quiet machine.

Usage (in the vLLM venv, see README):
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/bench_vllm_rollout.py \\
        --steps 15 --repeats 1 --out /tmp/vllm_rollout_table.md
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


def run(engine: str, model: str, steps: int, out: Path) -> list[dict]:
    """One quick-start run in a fresh process; returns its metrics records."""
    verl = Path(sys.executable).parent / "verl"
    cmd = [
        str(verl),
        "train",
        f"actor_rollout_ref.rollout.name={engine}",
        f"actor_rollout_ref.model.path={model}",
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={steps}",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        "trainer.logger=[jsonl]",
        f"trainer.output_dir={out}",
        f"trainer.default_local_dir={out}/ckpt",
        f"trainer.experiment_name=bench-{engine}",
    ]
    subprocess.run(
        cmd,
        check=True,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def summarize(records: list[dict]) -> dict[str, float]:
    steps = [r for r in records if "timing_s/gen" in r]
    vals = [r["val/accuracy"] for r in records if "val/accuracy" in r]
    rows = steps[1:] or steps
    return {
        "acc_before": vals[0],
        "acc_after": vals[-1],
        "points": 100 * (vals[-1] - vals[0]),
        "gen_s": statistics.median(r["timing_s/gen"] for r in rows),
        "update_weights_s": statistics.median(r.get("timing_s/update_weights", 0.0) for r in rows),
        "step_s": statistics.median(r["timing_s/step"] for r in rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="builtin://tiny-arithmetic", help="model path (default: the shipped built-in model)"
    )
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the table to")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"hf": [], "vllm": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for engine in ("hf", "vllm"):
                load = os.getloadavg()[0]
                results[engine].append(
                    {**summarize(run(engine, args.model, args.steps, Path(tmp) / f"{engine}-{i}")), "load": load}
                )
    lines = [
        "| engine | acc before | acc after | points | rollout s/step (gen) | update_weights s | step s "
        "| load (1 min) before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    med = {}
    for engine, runs in results.items():
        med[engine] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = med[engine]
        lines.append(
            f"| {engine} | {m['acc_before']:.3f} | {m['acc_after']:.3f} | {m['points']:+.1f} | {m['gen_s']:.3f} | "
            f"{m['update_weights_s']:.4f} | {m['step_s']:.2f} | {m['load']:.2f} |"
        )
    lines.append(
        f"\nrollout stage speed-up hf / vllm: {med['hf']['gen_s'] / med['vllm']['gen_s']:.2f}x "
        f"({args.steps} steps, {args.repeats} run(s) per engine, medians over steps 2..{args.steps})"
    )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
