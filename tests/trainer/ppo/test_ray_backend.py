"""Ray backend with FSDP2 (issue 5): 2 worker processes give the same numbers as one process.

Compared per step: pg_loss, grad_norm, rewards; and the final weights (checkpoint files).
"""

from __future__ import annotations

import os
import time

import pytest
from run_helpers import read_metrics, tiny_run_overrides
from safetensors.torch import load_file

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
KEYS = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "critic/advantages/mean", "actor/entropy")


def _run(model_dir, run_dir, **extra):
    base = {
        "trainer.total_training_steps": 3,
        "trainer.save_freq": 3,
        "data.train_batch_size": 4,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.calculate_entropy": True,
    }  # actor/entropy is compared too
    base.update(extra)
    cfg = load_config(None, tiny_run_overrides(model_dir, run_dir, **base))
    RLTrainer(config=cfg).fit()
    return read_metrics(run_dir)


def _weights(run_dir, step=3):
    return load_file(str(run_dir / "ckpt" / f"global_step_{step}" / "actor" / "model.safetensors"))


def _assert_close(a: dict, b: dict, steps=(1, 2, 3), tol=1e-5):
    for s in steps:
        for k in KEYS:
            assert a[s][k] == pytest.approx(b[s][k], abs=tol, rel=tol), (s, k, a[s][k], b[s][k])


@pytest.fixture(scope="module")
def local_run(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("local")
    return run_dir, _run(tiny_model_dir, run_dir)


def test_two_ray_workers_equal_one_local_process(local_run, tiny_model_dir, tmp_path):
    local_dir, local = local_run
    ray_metrics = _run(tiny_model_dir, tmp_path, **{"trainer.n_gpus_per_node": 2})
    _assert_close(local, ray_metrics)
    wa, wb = _weights(local_dir), _weights(tmp_path)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-5


def test_dynamic_bsz_equals_fixed_micro_batches(local_run, tiny_model_dir, tmp_path):
    _, local = local_run
    dyn = _run(
        tiny_model_dir,
        tmp_path,
        **{
            "trainer.n_gpus_per_node": 2,
            "actor_rollout_ref.actor.use_dynamic_bsz": True,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 64,
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": True,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 64,
        },
    )
    _assert_close(local, dyn)


def test_two_worker_checkpoint_resumes_locally_and_back(local_run, tiny_model_dir, tmp_path):
    _, local = local_run
    # 2 Ray workers write global_step_2; the local backend resumes it for step 3
    _run(
        tiny_model_dir,
        tmp_path,
        **{"trainer.n_gpus_per_node": 2, "trainer.total_training_steps": 2, "trainer.save_freq": 2},
    )
    resumed = _run(tiny_model_dir, tmp_path)
    _assert_close(local, resumed, steps=(3,))
    # and back: a local checkpoint resumed by 2 Ray workers
    back_dir = tmp_path / "back"
    _run(tiny_model_dir, back_dir, **{"trainer.total_training_steps": 2, "trainer.save_freq": 2})
    back = _run(tiny_model_dir, back_dir, **{"trainer.n_gpus_per_node": 2})
    _assert_close(local, back, steps=(3,))


def test_killed_worker_stops_driver_with_role_rank_and_error(tiny_model_dir, tmp_path):
    from verl.single_controller.ray import WorkerError

    killer = tmp_path / "kill_reward.py"
    killer.write_text(
        "import os, signal\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    pid = os.environ.pop('VERL_TEST_KILL_PID', None)\n"
        "    if pid:\n"
        "        os.kill(int(pid), signal.SIGKILL)\n"
        "    return 0.0\n"
    )
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                "trainer.n_gpus_per_node": 2,
                "custom_reward_function.path": str(killer),
                "actor_rollout_ref.actor.reuse_old_log_probs": False,
            },
        ),
    )  # the first call after the reward is compute_log_prob
    trainer = RLTrainer(config=cfg)
    pids = trainer._parts().actor_rollout_wg.worker_pids()
    os.environ["VERL_TEST_KILL_PID"] = str(pids[1])
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"actor_rollout_ref worker rank 1 failed in compute_log_prob"):
        trainer.fit()
    assert time.monotonic() - start < 60
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(pids[0]):
        time.sleep(0.2)
    assert not _alive(pids[0]), "the surviving rank was not shut down (orphan process)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _quickstart(run_dir, *overrides):
    from verl.commands.train import run

    run(
        "quickstart",
        [
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "data.val_files=[]",
            "trainer.save_freq=3",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            "actor_rollout_ref.actor.calculate_entropy=true",  # actor/entropy is compared too
            f"trainer.output_dir={run_dir / 'out'}",
            f"trainer.default_local_dir={run_dir / 'ckpt'}",
            *overrides,
        ],
    )
    return read_metrics(run_dir)


def test_builtin_grpo_config_two_workers_equal_local(tmp_path):
    """`verl train trainer.device=cpu trainer.n_gpus_per_node=2` on the built-in GRPO config (issue 5)."""
    local = _quickstart(tmp_path / "local")
    ray2 = _quickstart(tmp_path / "ray", "trainer.device=cpu", "trainer.n_gpus_per_node=2")
    _assert_close(local, ray2)
    wa, wb = _weights(tmp_path / "local"), _weights(tmp_path / "ray")
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-5
    # FSDP2 CPU offload of parameters and optimizer state changes where tensors live, not the numbers
    off = _quickstart(
        tmp_path / "offload",
        "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    )
    _assert_close(local, off)


def test_critic_in_its_own_resource_pool(local_run, tiny_model_dir, tmp_path):
    metrics = _run(
        tiny_model_dir,
        tmp_path,
        **{
            "trainer.n_gpus_per_node": 2,
            "algorithm.adv_estimator": "gae",
            "actor_rollout_ref.rollout.n": 1,
            "critic.placement": "separate",
            "critic.ppo_micro_batch_size_per_gpu": 1,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
            "trainer.save_freq": -1,
        },
    )
    assert metrics[3]["critic/grad_norm"] > 0
