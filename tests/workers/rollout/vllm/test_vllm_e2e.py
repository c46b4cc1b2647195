"""GRPO with ``rollout.name=vllm`` (CPU build): the built-in task and GSM8K, 3 steps each.

After every actor update the engine's log-probs of a fixed sequence must equal the trained
actor's (fp32: max abs diff <= 1e-3; measured ~1e-5), and the mismatch metrics are logged.
The built-in task runs the shipped built-in model (``builtin://tiny-arithmetic``, head size 32);
GSM8K a random Qwen2 of head size 32 (``init-model --size tiny`` has head size 16, which vLLM's
CPU attention refuses).
"""

from __future__ import annotations

import math

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides

from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS, head32_random_model
from verl.config import load_config
from verl.modules.forward import compute_log_probs
from verl.trainer import RLTrainer

pytestmark = [
    *VLLM_MARKS,
    pytest.mark.e2e,
]


@pytest.fixture()
def engine_checks(monkeypatch):
    """After each weight sync (= after each update), engine vs actor log-probs of a fixed sequence."""
    from verl.workers.rollout_sync import SyncedRollout

    diffs: list[float] = []
    original = SyncedRollout.sync_weights

    def checked(self, actor, force=False):
        stale = self._stale or force
        original(self, actor, force)
        if stale:
            fixed = list(range(5, 5 + 15))
            ids = torch.tensor([fixed])
            with torch.no_grad():
                lp = compute_log_probs(
                    actor.module, ids, torch.ones_like(ids), torch.arange(len(fixed))[None], len(fixed) - 1
                )[0]
            diffs.append(float((self.engine.score(fixed) - lp).abs().max()))

    monkeypatch.setattr(SyncedRollout, "sync_weights", checked)
    return diffs


def _fit_and_check(trainer, diffs):
    """Train, check the weights after the last update too, and always close the in-process engine."""
    try:
        history = trainer.fit()
        worker = trainer.parts.actor_rollout_wg.workers[0]
        worker.rollout.sync_weights(worker.actor_engine, force=True)  # the last update is never generated with
    finally:
        for worker in getattr(getattr(trainer.parts, "actor_rollout_wg", None), "workers", []):
            if hasattr(getattr(worker, "rollout", None), "engine"):
                worker.rollout.engine.close()
    assert len(diffs) == 4 and max(diffs) <= 1e-3, diffs  # initial weights + after each of the 3 updates
    return history


def test_three_grpo_steps_builtin_task(tmp_path, engine_checks):
    # reuse off: on-policy steps would take old log-probs from the update forward and skip the
    # rollout-vs-training mismatch metrics this test checks
    overrides = tiny_run_overrides(
        "builtin://tiny-arithmetic",
        tmp_path,
        **{
            "actor_rollout_ref.rollout.name": "vllm",
            "trainer.total_training_steps": 3,
            "actor_rollout_ref.actor.reuse_old_log_probs": False,
        },
    )
    _fit_and_check(RLTrainer(config=load_config(None, overrides)), engine_checks)
    metrics = read_metrics(tmp_path)
    assert sorted(metrics) == [1, 2, 3]
    for m in metrics.values():
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        assert m["training/rollout_probs_diff_max"] <= 1e-3 and m["timing_s/update_weights"] >= 0
        assert abs(m["actor/ppo_kl"]) < 1e-5  # on-policy: the engine sampled from the actor's weights


def test_three_grpo_steps_gsm8k_qwen(shared_dir, tmp_path, engine_checks):
    from verl.data.prepare import main as prepare_main

    model = head32_random_model("qwen2", shared_dir / "tokenizers" / "qwen2.5", tmp_path / "model")
    assert (
        prepare_main(
            ["gsm8k", "--input", str(shared_dir / "data" / "gsm8k" / "test.jsonl"), "--out", str(tmp_path / "data")]
        )
        == 0
    )
    trainer = RLTrainer(
        config=load_config(
            None,
            [
                f"actor_rollout_ref.model.path={model}",
                "actor_rollout_ref.rollout.name=vllm",
                "algorithm.adv_estimator=grpo",
                "actor_rollout_ref.rollout.n=2",
                f"data.train_files=[{tmp_path / 'data' / 'test.parquet'}]",
                "data.val_files=[]",
                "data.train_batch_size=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "data.max_prompt_length=512",
                "data.filter_overlong_prompts=true",
                "data.max_response_length=8",
                "trainer.total_training_steps=3",
                "trainer.val_before_train=false",
                "trainer.logger=[jsonl]",
                "trainer.progress_bar=false",
                "trainer.plot=false",
                "algorithm.rollout_correction.rollout_is=token",
                f"trainer.output_dir={tmp_path / 'out'}",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            ],
        )
    )
    history = _fit_and_check(trainer, engine_checks)
    assert [h["step"] for h in history] == [1, 2, 3]
    for h in history:
        assert h["reward/num_errors"] == 0 and h["training/rollout_probs_diff_max"] <= 1e-3
        assert h["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-3)  # same weights → ρ ≈ 1
