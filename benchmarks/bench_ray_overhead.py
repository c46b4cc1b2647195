"""Step time of the local backend vs 2 Ray workers (FSDP2, gloo) on the same config.

Runs the same GRPO config for ``--steps`` steps with ``trainer.backend=local`` (one process) and
with ``trainer.n_gpus_per_node=2`` (two Ray worker processes), and prints medians over the steps
after the first (warm-up) one:

- ``step``: wall time of one RL step (``timing_s/step``);
- per stage: ``gen``, ``old_log_prob``, ``update_actor`` as seen by the driver;
- Ray overhead per step: driver-side stage time minus the time the workers report computing
  (``timing_s/generate_sequences``, ``timing_s/update_actor_worker``), i.e. dispatch,
  serialisation and waiting; plus ``timing_s/update_weights`` (full-state gather for the rollout).

Usage: ``python benchmarks/bench_ray_overhead.py [--model DIR] [--steps 6] [overrides...]``.
Timings on a shared machine are noisy: compare the ratios measured in one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from verl.config import load_config
from verl.trainer import RLTrainer

STAGES = ("step", "gen", "old_log_prob", "update_actor", "update_weights")


def run(backend_overrides: list[str], common: list[str], out: Path) -> list[dict[str, float]]:
    cfg = load_config(
        None, [*common, *backend_overrides, f"trainer.output_dir={out}", f"trainer.default_local_dir={out}/ckpt"]
    )
    history = RLTrainer(config=cfg).fit()
    return [h for h in history if "timing_s/step" in h]


def summarize(name: str, history: list[dict[str, float]]) -> dict[str, float]:
    rows = history[1:] or history
    med = {s: statistics.median(h.get(f"timing_s/{s}", 0.0) for h in rows) for s in STAGES}
    med["overhead_gen"] = statistics.median(
        h["timing_s/gen"] - h.get("timing_s/generate_sequences", h["timing_s/gen"]) for h in rows
    )
    med["overhead_update"] = statistics.median(
        h["timing_s/update_actor"] - h.get("timing_s/update_actor_worker", h["timing_s/update_actor"]) for h in rows
    )
    print(f"{name:>10} " + " ".join(f"{k}={v:.3f}s" for k, v in med.items()), flush=True)
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="builtin://tiny-arithmetic")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    common = [
        f"actor_rollout_ref.model.path={args.model}",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=4",
        "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "data.val_files=[]",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        *args.overrides,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        local = summarize("local", run(["trainer.n_gpus_per_node=1"], common, Path(tmp) / "local"))
        ray2 = summarize("ray x2", run(["trainer.n_gpus_per_node=2"], common, Path(tmp) / "ray"))
    print(f"step time ratio ray x2 / local = {ray2['step'] / local['step']:.2f}")
    print(
        f"Ray overhead per step (dispatch+wait, gen + update) = {ray2['overhead_gen'] + ray2['overhead_update']:.3f}s, "
        f"weight sync = {ray2['update_weights']:.3f}s"
    )


if __name__ == "__main__":
    main()
