"""A 2-step PPO run (GAE) with tensor parallelism on 2 Ray workers — actor, critic and the hf
rollout at tp=2, one data-parallel rank — equals the tp=1 run in one local process.

Both runs have one data-parallel rank, so the mini-batches hold the same rows; the rollouts are the
same tokens (per-row sampling seeds; the TP group decodes its prompts together with whole logits),
only the layout of the weights differs. Compared per step: the actor's and the critic's losses and
gradient norms, the values and the rollout / actor log-prob gap through the PPO KL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [pytest.mark.e2e, pytest.mark.ray]
KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/ppo_kl",
    "critic/vf_loss",
    "critic/grad_norm",
    "critic/values/mean",
    "response_length/mean",
    "critic/score/mean",
)


def test_gae_two_steps_tp2_equals_tp1(tiny_model_dir: Path, tmp_path: Path) -> None:
    runs = {}
    for tp in (1, 2):
        extra = {
            "algorithm.adv_estimator": "gae",
            "trainer.total_training_steps": 2,
            "trainer.n_gpus_per_node": tp,
            "actor_rollout_ref.rollout.n": 1,
            "critic.optim.lr": 1e-3,
            "trainer.balance_batch": False,
            "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size": tp,
            "critic.model.fsdp_config.tensor_parallel_size": tp,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": tp,
        }
        RLTrainer(config=load_config(None, tiny_run_overrides(tiny_model_dir, tmp_path / f"tp{tp}", **extra))).fit()
        runs[tp] = read_metrics(tmp_path / f"tp{tp}")
    print(
        {
            k: (runs[1][2].get(k), runs[2][2].get(k))
            for k in (*KEYS, "timing_s/update_weights", "perf/update_weights_peak_extra_mb")
        }
    )
    assert abs(runs[1][2]["critic/values/mean"]) > 1e-4 and runs[1][2]["actor/grad_norm"] > 0
    assert runs[2][2]["timing_s/update_weights"] > 0  # the TP rollout copy was synced
    for step in (1, 2):
        for key in KEYS:
            assert runs[2][step][key] == pytest.approx(runs[1][step][key], abs=1e-4, rel=1e-4), (step, key)


def test_grpo_two_steps_sp2_actor_into_tp2_rollout_equals_one_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    """An FSDP2 x Ulysses SP actor synced into a TP=2 hf rollout (the rollout's own layout): same
    tokens and the same PPO KL (engine vs actor log-probs) as one process."""
    keys = ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "response_length/mean", "critic/score/mean")
    runs = {}
    for n in (1, 2):
        extra = {
            "trainer.total_training_steps": 2,
            "trainer.n_gpus_per_node": n,
            "trainer.balance_batch": False,
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size": n,
            "actor_rollout_ref.rollout.tensor_model_parallel_size": n,
        }
        RLTrainer(config=load_config(None, tiny_run_overrides(tiny_model_dir, tmp_path / f"n{n}", **extra))).fit()
        runs[n] = read_metrics(tmp_path / f"n{n}")
    print(
        {
            k: (runs[1][2].get(k), runs[2][2].get(k))
            for k in (*keys, "timing_s/update_weights", "perf/update_weights_peak_extra_mb")
        }
    )
    assert runs[2][2]["perf/update_weights_peak_extra_mb"] > 0  # the sharded actor was gathered tensor by tensor
    for step in (1, 2):
        for key in keys:
            assert runs[2][step][key] == pytest.approx(runs[1][step][key], abs=1e-4, rel=1e-4), (step, key)
