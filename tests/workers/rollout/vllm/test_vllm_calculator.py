"""The built-in multi-turn ``calculator`` preset with ``rollout.name=vllm`` (CPU build): 3 GRPO steps.

``verl train calculator actor_rollout_ref.rollout.name=vllm`` runs the shipped tool-calling model
(``builtin://tiny-calculator``, 2 heads of size 32: vLLM's CPU attention refuses 16) through the
tool_agent loop on vLLM's async engine. Checks: the steps complete with finite metrics, the
warm-started model calls the calculator (tool calls counted, turns > 1, no malformed calls),
weights are synced after every update and the engine's log-probs of the sampled tokens equal the
actor's (``training/rollout_probs_diff_max``).

Run: ``VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_calculator.py``.
"""

from __future__ import annotations

import pytest

from tests.trainer.ppo.multiturn_helpers import finite_metrics
from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS
from verl.config import load_config
from verl.trainer import RLTrainer

pytestmark = [
    *VLLM_MARKS,
    pytest.mark.e2e,
]


def test_calculator_preset_three_grpo_steps_on_vllm(tmp_path):
    # reuse off: on-policy steps would take old log-probs from the update forward and skip the
    # rollout-vs-training mismatch metrics checked here
    trainer = RLTrainer(
        config=load_config(
            "calculator",
            [
                "actor_rollout_ref.rollout.name=vllm",
                "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                "actor_rollout_ref.rollout.n=4",
                "trainer.total_training_steps=3",
                "trainer.val_before_train=false",
                "data.val_files=[]",
                "actor_rollout_ref.actor.reuse_old_log_probs=false",
                "trainer.logger=[jsonl]",
                "trainer.progress_bar=false",
                "trainer.plot=false",
                f"trainer.output_dir={tmp_path / 'out'}",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            ],
        )
    )
    try:
        history = trainer.fit()
        inner = trainer.parts.actor_rollout_wg.workers[0].rollout.engine.engine
        assert inner.serve_async  # the tool_agent loop ran on vLLM's async engine
    finally:
        for worker in getattr(getattr(trainer.parts, "actor_rollout_wg", None), "workers", []):
            if hasattr(getattr(worker, "rollout", None), "engine"):
                worker.rollout.engine.close()
    assert [h["step"] for h in history] == [1, 2, 3]
    finite_metrics(history)
    for h in history:
        assert h["training/rollout_probs_diff_max"] <= 1e-3  # the engine generates with the trained weights
        assert h["multiturn/malformed_tool_calls"] == 0 and h["multiturn/tokenization_mismatch"] == 0.0
    assert all(h["timing_s/update_weights"] > 0 for h in history[1:])  # synced after every update
    # the warm start calls the calculator on about half of the problems: 16 trajectories a step
    assert max(h["tool_call_counts/max"] for h in history) >= 1.0 and max(h["num_turns/max"] for h in history) >= 3.0
    assert sum(h["tool_call_counts/mean"] for h in history) / 3 >= 0.2
