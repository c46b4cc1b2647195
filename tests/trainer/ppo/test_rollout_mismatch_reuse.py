"""The rollout/training mismatch metrics exist when the old-log-prob forward is skipped.

On the quick start the update is exactly on-policy, so the old log-probs come from the update
forward (`reuses_old_log_probs`) and the driver's mismatch stage has nothing to compare; the
actor computes the metrics from that forward instead.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.config import load_config
from verl.engine import MicroBatchSpec
from verl.trainer import RLTrainer
from verl.workers import actor as actor_mod
from verl.workers.actor import compute_log_prob, reuses_old_log_probs


def _hand_metrics(train: np.ndarray, rollout: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    t, r = train[mask != 0].astype(np.float64), rollout[mask != 0].astype(np.float64)
    diff = np.abs(np.exp(t) - np.exp(r))
    lr = np.clip(t - r, -20, 20)
    return {
        "training/rollout_probs_diff_max": diff.max(),
        "training/rollout_probs_diff_mean": diff.mean(),
        "training/rollout_probs_diff_std": diff.std(),
        "training/rollout_kl": (r - t).mean(),
        "training/rollout_k3_kl": (np.exp(lr) - lr - 1).mean(),
    }


@pytest.mark.e2e
def test_quickstart_step_logs_mismatch_of_the_update_forward(tmp_path, monkeypatch):
    cfg = load_config(
        "quickstart",
        [
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.logger=[jsonl]",
            "trainer.plot=false",
            "trainer.progress_bar=false",
            "trainer.save_freq=-1",
            f"trainer.output_dir={tmp_path / 'out'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
        ],
    )
    assert reuses_old_log_probs(cfg.actor_rollout_ref.actor, cfg.data.train_batch_size, cfg.algorithm.use_kl_in_reward)
    seen: dict[str, torch.Tensor] = {}
    original = actor_mod.PPOActor.update_policy

    def spy(self, data, temperature, mini_batch_size):
        assert "old_log_probs" not in data.batch.keys()  # the reuse path: no old-log-prob forward ran
        seen["train"], _ = compute_log_prob(self.engine, data, temperature, MicroBatchSpec(64))
        seen["rollout"], seen["mask"] = data.batch["rollout_log_probs"].clone(), data.batch["response_mask"].clone()
        return original(self, data, temperature, mini_batch_size)

    monkeypatch.setattr(actor_mod.PPOActor, "update_policy", spy)
    history = RLTrainer(config=cfg).fit()
    step = (
        next(h for h in history if "training/rollout_kl" in h)
        if any("training/rollout_kl" in h for h in history)
        else {}
    )
    want = _hand_metrics(seen["train"].numpy(), seen["rollout"].numpy(), seen["mask"].numpy())
    for key, value in want.items():
        assert key in step, key
        assert math.isfinite(step[key])
        assert step[key] == pytest.approx(value, abs=2e-6), key
    assert want["training/rollout_probs_diff_max"] < 1e-3  # the hf engine samples with the trainer's forward
