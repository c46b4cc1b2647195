"""The whole RL loop for a few steps on a tiny model (local backend): PPO and GRPO learn something.

Asserts real outcomes: finite metrics, changed actor (and critic) weights, the on-policy first
ratio is 1, the step counter (known_faults B29) and resume-of-finished (B30).
"""

from __future__ import annotations

import math

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides
from safetensors.torch import load_file

from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = pytest.mark.e2e  # whole training loops (and subprocesses)


def _run(model_dir, run_dir, **extra):
    cfg = load_config(None, tiny_run_overrides(model_dir, run_dir, **extra))
    trainer = RLTrainer(config=cfg)
    trainer.fit()
    return trainer


def _actor_weights(trainer) -> dict[str, torch.Tensor]:
    module = trainer.parts.actor_rollout_wg.workers[0].actor_engine.module
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _finite(metrics: dict) -> None:
    bad = {k: v for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)}
    assert not bad, bad


def test_grpo_updates_actor_with_finite_metrics(tiny_model_dir, tmp_path):
    initial = load_file(str(tiny_model_dir / "model.safetensors"))
    trainer = _run(tiny_model_dir, tmp_path, **{"trainer.total_training_steps": 3})
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2, 3]
    for m in metrics.values():
        _finite(m)
        for key in (
            "actor/pg_loss",
            "actor/grad_norm",
            "critic/score/mean",
            "timing_s/gen",
            "perf/throughput",
            "perf/mfu/actor",
        ):
            assert key in m, key
    assert metrics[1]["actor/grad_norm"] > 0
    # on-policy first mini-batch: old_log_probs equal the training forward, ratio 1, nothing clipped
    assert abs(metrics[1]["actor/ppo_kl"]) < 1e-6 and metrics[1]["actor/pg_clipfrac"] == 0.0
    after = _actor_weights(trainer)
    changed = [k for k in initial if not torch.equal(initial[k], after[k])]
    assert changed, "actor weights did not change"


def test_ppo_with_critic_updates_both(tiny_model_dir, tmp_path):
    trainer = _run(
        tiny_model_dir,
        tmp_path,
        **{
            "algorithm.adv_estimator": "gae",
            "actor_rollout_ref.rollout.n": 1,
            "critic.optim.lr": 1e-3,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
            "critic.ppo_micro_batch_size_per_gpu": 2,
        },
    )
    metrics = read_metrics(tmp_path)
    for m in metrics.values():
        _finite(m)
    assert metrics[1]["critic/grad_norm"] > 0 and "critic/vf_loss" in metrics[2]
    critic = trainer.parts.critic_wg.workers[0].engine.module
    head = critic.value_head.weight.detach()
    assert head.abs().sum() > 0, "critic value head (zero-initialised) did not change"


def test_b29_every_batch_trained_once_and_validated_once(tiny_model_dir, tmp_path):
    # 4 prompts, batch 2, 1 epoch -> exactly 2 updates, logged at steps 1 and 2, checkpoint global_step_2
    from verl.data import RLDataLoader

    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                "data.train_batch_size": 2,
                "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
                "trainer.total_training_steps": "null",
                "trainer.total_epochs": 1,
                "trainer.save_freq": 1,
                "trainer.test_freq": 1,
                "data.val_files": "[builtin://arithmetic/test]",
            },
        ),
    )
    loader = RLDataLoader(cfg.data, split="train")
    trainer = RLTrainer(config=cfg, dataloader=_first_n(loader, 4))
    history = trainer.fit()
    steps = [h["step"] for h in history]
    assert steps == [1, 2]
    assert sum("val/accuracy" in h for h in history) == 2
    assert (tmp_path / "ckpt" / "global_step_2" / "manifest.json").is_file()


def test_b30_resume_of_finished_run_trains_zero_steps(tiny_model_dir, tmp_path, capsys):
    _run(tiny_model_dir, tmp_path, **{"trainer.save_freq": 2})
    before = read_metrics(tmp_path)
    for _ in range(2):
        trainer = _run(tiny_model_dir, tmp_path, **{"trainer.save_freq": 2})
        assert trainer.global_step == 2
    assert "already complete" in capsys.readouterr().out
    assert read_metrics(tmp_path) == before
    assert not (tmp_path / "ckpt" / "global_step_3").exists()


def _first_n(loader, n):
    """A loader restricted to its first n prompts (B29's 4-prompt dataset)."""
    from torch.utils.data import Subset

    from verl.data import RLDataLoader

    return RLDataLoader(
        loader.config, tokenizer=loader.tokenizer, split="train", dataset=Subset(loader.dataset, range(n))
    )


@pytest.mark.parametrize(
    "estimator,extra",
    [
        ("rloo", {}),
        ("reinforce_plus_plus", {"actor_rollout_ref.actor.entropy_coeff": 0.01}),
        ("remax", {"actor_rollout_ref.rollout.n": 1}),
        (
            "grpo",
            {
                "algorithm.norm_adv_by_std_in_grpo": False,
                "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
                "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
            },
        ),
    ],
)
def test_other_estimators_train(tiny_model_dir, tmp_path, estimator, extra):
    trainer = _run(tiny_model_dir, tmp_path, **{"algorithm.adv_estimator": estimator, **extra})
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        _finite(m)
    assert any(m["actor/grad_norm"] > 0 for m in metrics.values())
    assert trainer.global_step == 2


def test_reward_that_always_raises_stops_the_run_after_three_steps(tiny_model_dir, tmp_path):
    bad = tmp_path / "raise_reward.py"
    bad.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    raise KeyError('oops')\n"
    )
    with pytest.raises(RuntimeError, match="failed .* on every sample for 3 consecutive steps"):
        _run(tiny_model_dir, tmp_path, **{"custom_reward_function.path": str(bad), "trainer.total_training_steps": 5})
    assert sorted(read_metrics(tmp_path)) == [1, 2]  # two contained steps were trained and logged


def test_reward_that_sometimes_raises_is_contained(tiny_model_dir, tmp_path):
    flaky = tmp_path / "flaky_reward.py"
    flaky.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if len(solution_str) % 2:\n        raise ValueError('odd')\n    return 1.0\n"
    )
    _run(tiny_model_dir, tmp_path, **{"custom_reward_function.path": str(flaky)})
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert sum(m["reward/num_errors"] for m in metrics.values()) > 0
