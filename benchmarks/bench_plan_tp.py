"""`verl plan` under tensor parallelism: predicted vs measured per-worker peak RSS.

The shape and sampling of benchmarks/bench_plan_sp.py (GSM8K bench shape, random Qwen2 ``small``, 2
Ray workers, fixed micro-batches), at ``actor_rollout_ref.actor.fsdp_config.tensor_parallel_size``
and ``actor_rollout_ref.rollout.tensor_model_parallel_size`` 1 (data parallel 2) and 2 (one
data-parallel rank, blocks split over both workers). Prints one JSON line per layout: predicted,
measured (the larger worker), and the relative error. Not asserted anywhere.

    python benchmarks/bench_plan_tp.py [--steps 2] [--micro 4] [--layouts 1,2] [--plan-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import psutil
from bench_plan_sp import WorkerRss


def run_layout(tp: int, steps: int, micro: int, work: Path, plan_only: bool = False) -> dict[str, float]:
    from verl.config import load_config
    from verl.trainer import RLTrainer
    from verl.commands.bench.bench import shape_config
    from verl.commands.plan import ModelShape, measure_runtime, plan_memory

    path, overrides = shape_config("gsm8k", work / f"tp{tp}", steps)
    overrides += [
        "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.model.use_remove_padding=true",
        f"actor_rollout_ref.actor.fsdp_config.tensor_parallel_size={tp}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "trainer.balance_batch=false",
    ]
    cfg = load_config(path, overrides)
    actor = ModelShape.from_path(cfg.actor_rollout_ref.model.path)
    plan = plan_memory(cfg, float(psutil.virtual_memory().total), measure_runtime(cfg), actor)
    row = {
        "tp": tp,
        "predicted_mib": plan.peak / 2**20,
        "peak_stage": plan.peak_stage,
        "static_mib": sum(plan.static.values()) / 2**20,
        "update_actor_stage_mib": plan.stages["update_actor"] / 2**20,
    }
    if plan_only:
        return row
    with WorkerRss() as rss:
        RLTrainer(config=load_config(path, overrides)).fit()
    measured = max(rss.peaks.values())
    return {
        **row,
        "measured_mib": measured / 2**20,
        "error": (plan.peak - measured) / measured,
        "workers": len(rss.peaks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--out", default=None)
    parser.add_argument("--plan-only", action="store_true", help="print the predictions only (no run)")
    parser.add_argument("--layouts", default="1,2", help="comma-separated tp values to run")
    ns = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in (int(x) for x in ns.layouts.split(",")):
            rows.append(run_layout(tp, ns.steps, ns.micro, Path(tmp), ns.plan_only))
            import ray

            ray.shutdown()  # a fresh cluster per layout: worker processes and their peaks are its own
            print(json.dumps(rows[-1]), flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
