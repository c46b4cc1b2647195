"""Ray backend with FSDP2 and a critic (GAE): 2 worker processes give the same numbers as one process.

Compared per step: the critic's loss, grad norm and values (the values of steps 2 and 3 are
computed after the critic's updates), the actor's loss and grad norm; and the final critic and
actor weights. Measured on the tiny model (CPU, gloo, critic lr 1e-3): the critic metrics agree to
7.5e-9, the actor's grad norm to 4.8e-7, the critic weights to 3.0e-7 and the actor weights to
3.2e-6 (float32 sums reduced in a different order), so 1e-5 is the bound, with 3x margin.

Also checks that FSDP2 no longer warns that the critic's root module (``ValueModel``) returns a
view tensor: the warning goes to the Ray workers' stderr, read here from the session's log files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import read_metrics, tiny_run_overrides
from safetensors.torch import load_file

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
KEYS = (
    "critic/vf_loss",
    "critic/grad_norm",
    "critic/values/mean",
    "critic/values/max",
    "critic/vpred_mean",
    "critic/advantages/max",
    "actor/pg_loss",
    "actor/grad_norm",
)
VIEW_WARNING = "returned a view tensor"


def _run(model_dir: Path, run_dir: Path, **extra: object) -> dict[int, dict]:
    base = {
        "algorithm.adv_estimator": "gae",
        "trainer.total_training_steps": 3,
        "trainer.save_freq": 3,
        "data.train_batch_size": 4,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "critic.ppo_micro_batch_size_per_gpu": 2,
        "critic.optim.lr": 1e-3,
    }  # the default 1e-5 barely moves the critic: the weight check would be weak
    base.update(extra)
    RLTrainer(config=load_config(None, tiny_run_overrides(model_dir, run_dir, **base))).fit()
    return read_metrics(run_dir)


def _max_diff(a_dir: Path, b_dir: Path, role: str) -> float:
    path = Path("ckpt") / "global_step_3" / role / "model.safetensors"
    wa, wb = load_file(str(a_dir / path)), load_file(str(b_dir / path))
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def _ray_worker_stderr() -> str:
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob("worker-*.err")))


def test_gae_two_ray_workers_equal_one_local_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    local = _run(tiny_model_dir, tmp_path / "local")
    ray2 = _run(tiny_model_dir, tmp_path / "ray", **{"trainer.n_gpus_per_node": 2})
    assert local[3]["critic/grad_norm"] > 0 and abs(local[3]["critic/values/mean"]) > 1e-4  # the critic learns
    for step in (1, 2, 3):
        for key in KEYS:
            assert ray2[step][key] == pytest.approx(local[step][key], abs=1e-5, rel=1e-5), (step, key)
    assert _max_diff(tmp_path / "local", tmp_path / "ray", "critic") <= 1e-5
    assert _max_diff(tmp_path / "local", tmp_path / "ray", "actor") <= 1e-5
    assert VIEW_WARNING not in _ray_worker_stderr()
