"""``timing_s/update_weights`` of ``hybrid_engine=false`` on Ray: 2 FSDP2 actor workers + a 2-worker rollout pool.

Usage: ``PYTHONPATH=<tree> python benchmarks/split_rollout_sync_bench.py <run_dir> [model_dir]``; prints
``RESULT {step: [timing_s/update_weights, weight_sync/megabytes]}`` for 5 GRPO steps of the built-in task
(the schema's built-in model, or ``model_dir``). Figures: benchmarks/split_rollout_sync.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from verl.config import load_config
from verl.trainer import RLTrainer


def read_metrics(run: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run / "out" / "metrics.jsonl").read_text().splitlines()]
    return {int(r["step"]): r for r in rows}


run = Path(sys.argv[1])
ov = {
    "data.train_batch_size": 8,
    "actor_rollout_ref.rollout.n": 4,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
    "data.max_prompt_length": 16,
    "data.max_response_length": 8,
    "algorithm.adv_estimator": "grpo",
    "data.val_files": "[]",
    "trainer.total_training_steps": 5,
    "trainer.val_before_train": False,
    "trainer.logger": "[jsonl]",
    "trainer.progress_bar": False,
    "trainer.plot": False,
    "trainer.output_dir": str(run / "out"),
    "trainer.default_local_dir": str(run / "ckpt"),
    "trainer.save_freq": -1,
    "actor_rollout_ref.hybrid_engine": False,
    "trainer.n_gpus_per_node": 2,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
}
if len(sys.argv) > 2:
    ov["actor_rollout_ref.model.path"] = sys.argv[2]
RLTrainer(config=load_config(None, [f"{k}={v}" for k, v in ov.items()])).fit()
m = read_metrics(run)
print(
    "RESULT", json.dumps({s: [m[s]["timing_s/update_weights"], m[s].get("weight_sync/megabytes")] for s in sorted(m)})
)
