"""`verl plan` under Ulysses sequence parallelism: predicted vs measured per-worker peak RSS.

Runs the GSM8K bench shape (random Qwen2 ``small``, 4 prompts x n=4, 64-token responses) on 2 Ray
workers at ``actor_rollout_ref.actor.ulysses_sequence_parallel_size`` 1 (data parallel 2) and 2
(one data-parallel rank, sequences split), with fixed micro-batches, and samples the resident
memory of every Ray worker process every 20 ms while the steps run. The prediction is
`verl.commands.plan.plan_memory` for the same config, with the runtime term measured in this
process as ``verl plan`` does. Prints one JSON line per layout: predicted, measured (the larger
worker), and the relative error. Not asserted anywhere (a benchmark note, benchmarks/README.md).

    python benchmarks/bench_plan_sp.py [--steps 2] [--micro 4] [--out bench_plan_sp.json] [--plan-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from pathlib import Path

import psutil


class WorkerRss:
    """Peak RSS of each Ray worker process (``ray::_WorkerHost``) seen while sampling."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.peaks: dict[int, int] = {}
        self._stop, self._interval = threading.Event(), interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            for p in me.children(recursive=True):  # this run's Ray processes only (the machine is shared)
                try:
                    if any("_WorkerHost" in part for part in p.cmdline()):
                        self.peaks[p.pid] = max(self.peaks.get(p.pid, 0), p.memory_info().rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self._stop.wait(self._interval)

    def __enter__(self) -> WorkerRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_layout(sp: int, steps: int, micro: int, work: Path, plan_only: bool = False) -> dict[str, float]:
    from verl.config import load_config
    from verl.trainer import RLTrainer
    from verl.commands.bench.bench import shape_config
    from verl.commands.plan import ModelShape, measure_runtime, plan_memory

    path, overrides = shape_config("gsm8k", work / f"sp{sp}", steps)
    overrides += [
        "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.model.use_remove_padding=true",
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "trainer.balance_batch=false",
    ]
    cfg = load_config(path, overrides)
    actor = ModelShape.from_path(cfg.actor_rollout_ref.model.path)
    plan = plan_memory(cfg, float(psutil.virtual_memory().total), measure_runtime(cfg), actor)
    if plan_only:
        return {
            "sp": sp,
            "predicted_mib": plan.peak / 2**20,
            "peak_stage": plan.peak_stage,
            "stages_mib": {k: v / 2**20 for k, v in plan.stages.items()},
            "runtime_mib": plan.runtime / 2**20,
            "static_mib": sum(plan.static.values()) / 2**20,
        }
    with WorkerRss() as rss:
        RLTrainer(config=load_config(path, overrides)).fit()
    measured = max(rss.peaks.values())
    return {
        "sp": sp,
        "predicted_mib": plan.peak / 2**20,
        "measured_mib": measured / 2**20,
        "error": (plan.peak - measured) / measured,
        "peak_stage": plan.peak_stage,
        "update_actor_stage_mib": plan.stages["update_actor"] / 2**20,
        "workers": len(rss.peaks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--out", default=None)
    parser.add_argument("--plan-only", action="store_true", help="print the predictions only (no run)")
    parser.add_argument("--layouts", default="1,2", help="comma-separated sp values to run")
    ns = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sp in (int(x) for x in ns.layouts.split(",")):
            rows.append(run_layout(sp, ns.steps, ns.micro, Path(tmp), ns.plan_only))
            import ray

            ray.shutdown()  # a fresh cluster per layout: worker processes and their peaks are its own
            print(json.dumps(rows[-1]), flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
