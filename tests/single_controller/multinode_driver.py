"""Subprocess body of the multi-node tests: a 2-node `ray.cluster_utils.Cluster` on this machine.

``python multinode_driver.py equal <model_dir> <run_dir>``: a 2-step GRPO run with
``trainer.nnodes=2, n_gpus_per_node=1`` and one with ``nnodes=1, n_gpus_per_node=2`` on the same
cluster; prints one JSON line with both runs' metrics and the nodes that hosted ranks.

``python multinode_driver.py kill <model_dir> <run_dir>``: a long run on 2 nodes; once
``global_step_1`` is published the second node is removed (its raylet and workers killed); prints
one JSON line with the error, the seconds from the kill to the error, and the killed node's id.
Kept out of the pytest process so the session's own Ray instance is untouched.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from run_helpers import read_metrics, tiny_run_overrides

CLUSTER: list = []  # (cluster, worker node) once started: shut down before exiting
KEYS = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "actor/entropy")


def _cluster():
    from ray._common.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    # Cluster writes its address to /tmp/ray/ray_current_cluster, where any other process's plain
    # ray.init() would find it; the runs here pass the address explicitly, so take it back at once
    address_file = Path(get_ray_address_file(None))
    if address_file.is_file() and address_file.read_text().strip() == cluster.address:
        address_file.unlink()
    worker = cluster.add_node(num_cpus=3)
    cluster.wait_for_nodes()
    return cluster, worker


def _fit(model_dir: str, run_dir: Path, address: str, **extra: object) -> None:
    from verl.config import load_config
    from verl.trainer import RLTrainer

    base = {
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.calculate_entropy": True,
        "trainer.backend": "ray",
        "ray_kwargs.ray_init.address": address,
    }
    base.update(extra)
    RLTrainer(config=load_config(None, tiny_run_overrides(model_dir, run_dir, **base))).fit()


def equal(model_dir: str, run_dir: Path) -> dict:
    import ray

    from verl.single_controller.ray_nodes import node_watch

    cluster, _ = CLUSTER[:] = _cluster()
    _fit(model_dir, run_dir / "two", cluster.address, **{"trainer.nnodes": 2, "trainer.n_gpus_per_node": 1})
    hosts = sorted(node_watch().hosted)
    _fit(model_dir, run_dir / "one", cluster.address, **{"trainer.nnodes": 1, "trainer.n_gpus_per_node": 2})

    def pick(m):
        return {s: {k: row[k] for k in KEYS} for s, row in m.items()}

    return {
        "two": pick(read_metrics(run_dir / "two")),
        "one": pick(read_metrics(run_dir / "one")),
        "hosts": hosts,
        "nodes": sorted(n["NodeID"] for n in ray.nodes()),
    }


def kill(model_dir: str, run_dir: Path) -> dict:
    cluster, worker = CLUSTER[:] = _cluster()
    killed: dict = {}

    def killer() -> None:
        while not (run_dir / "ckpt" / "global_step_1").is_dir():
            time.sleep(0.2)
        killed["node"], killed["t"] = worker.node_id, time.monotonic()
        cluster.remove_node(worker, allow_graceful=False)

    threading.Thread(target=killer, daemon=True).start()
    try:
        _fit(
            model_dir,
            run_dir,
            cluster.address,
            **{
                "trainer.nnodes": 2,
                "trainer.n_gpus_per_node": 1,
                "trainer.total_training_steps": 200,
                "trainer.save_freq": 1,
            },
        )
        return {"error": None}
    except Exception as e:  # noqa: BLE001 - reported to the test
        from verl.run.checkpoint import check_checkpoint

        latest = (run_dir / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip()
        return {
            "error": f"{type(e).__name__}: {e}",
            "latency_s": time.monotonic() - killed.get("t", float("nan")),
            "killed": killed.get("node"),
            "latest": latest,
            "ckpt_problem": check_checkpoint(run_dir / "ckpt" / f"global_step_{latest}"),
        }


if __name__ == "__main__":
    mode, model, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    try:
        result = {"equal": equal, "kill": kill}[mode](model, out)
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        if CLUSTER:
            __import__("ray").shutdown()
            CLUSTER[0].shutdown()
    os._exit(0)  # skip Ray's atexit hooks: the cluster is already down
