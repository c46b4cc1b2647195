"""GRPO on GSM8K multi-turn (``verl prepare gsm8k --multiturn``, the GSM8K tool and interaction)
with ``rollout.name=vllm``: the agent loops run on vLLM's async engine (CPU build), 3 steps in
one local worker and 2 steps with two Ray workers (one engine each).

A random Qwen2 model with head size 32 (vLLM's CPU attention refuses 16) and the Qwen2.5
tokenizer, boosted so its turns end and open tool calls now and then. Checks: the steps complete,
every metric is finite, tool calls / malformed calls are counted (and match the dump), user turns
happen, weights are synced after every update (``timing_s/update_weights``) and the engine's
log-probs equal the actor's (``training/rollout_probs_diff_max``).

Run: ``VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_agent_loop_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.ppo.multiturn_helpers import boosted_random_qwen, finite_metrics
from tests.workers.rollout.vllm.vllm_helpers import HEAD32, VLLM_MARKS
from verl.config import load_config
from verl.data.prepare import main as prepare_main
from verl.trainer import RLTrainer

pytestmark = [
    *VLLM_MARKS,
    pytest.mark.e2e,
]
CONFIGS = Path(__file__).resolve().parents[4] / "verl" / "tools" / "configs"


@pytest.mark.parametrize("workers, steps", [(1, 3), pytest.param(2, 2, marks=pytest.mark.ray)])
def test_grpo_steps_multiturn_gsm8k_on_vllm(shared_dir, tmp_path, workers, steps):
    """One local worker (3 steps), or two Ray workers each with its own async engine (2 steps)."""
    from verl.modules import init_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(init_model.SIZES, "tiny", HEAD32)  # the helper builds --size tiny
        model = boosted_random_qwen(shared_dir, tmp_path / "model")
    assert (
        prepare_main(
            [
                "gsm8k",
                "--input",
                str(shared_dir / "data" / "gsm8k" / "test.jsonl"),
                "--out",
                str(tmp_path / "data"),
                "--multiturn",
            ]
        )
        == 0
    )
    dump = tmp_path / "rollouts"
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
                "data.return_raw_chat=true",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "data.max_prompt_length=1024",
                "data.filter_overlong_prompts=true",
                "data.max_response_length=32",
                f"trainer.total_training_steps={steps}",
                f"trainer.n_gpus_per_node={workers}",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                f"actor_rollout_ref.rollout.multi_turn.tool_config_path={CONFIGS / 'gsm8k_tool_config.yaml'}",
                "actor_rollout_ref.rollout.multi_turn.interaction_config_path="
                f"{CONFIGS / 'gsm8k_interaction_config.yaml'}",
                "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
                "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable",
                "actor_rollout_ref.rollout.max_num_batched_tokens=2048",
                "algorithm.rollout_correction.rollout_is=token",
                "trainer.val_before_train=false",
                "trainer.logger=[jsonl]",
                "trainer.progress_bar=false",
                "trainer.plot=false",
                f"trainer.rollout_data_dir={dump}",
                f"trainer.output_dir={tmp_path / 'out'}",
                f"trainer.default_local_dir={tmp_path / 'ckpt'}",
            ],
        )
    )
    try:
        history = trainer.fit()
        if workers == 1:  # local worker: look inside (Ray workers' engines stop with their actors)
            inner = trainer.parts.actor_rollout_wg.workers[0].rollout.engine.engine
            assert inner.serve_async and inner.backend.max_in_flight > 1  # trajectories were in flight together
    finally:
        for worker in getattr(getattr(trainer.parts, "actor_rollout_wg", None), "workers", []):
            if hasattr(getattr(worker, "rollout", None), "engine"):
                worker.rollout.engine.close()
    assert [h["step"] for h in history] == list(range(1, steps + 1))
    finite_metrics(history)
    for h in history:
        for key in (
            "num_turns/max",
            "tool_call_counts/mean",
            "multiturn/malformed_tool_calls",
            "multiturn/tool_errors",
            "timing_s/update_weights",
            "training/rollout_probs_diff_max",
        ):
            assert key in h, key
        assert h["training/rollout_probs_diff_max"] <= 1e-3  # the engine generates with the trained weights
    assert all(h["timing_s/update_weights"] > 0 for h in history[1:])  # synced after every update
    assert max(h["num_turns/max"] for h in history) > 1
    rows = [json.loads(line) for f in sorted(dump.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert len(rows) == 4 * steps
    calls = [c for r in rows for c in r["tool_calls"]]
    assert len(calls) == round(sum(h["tool_call_counts/mean"] * 4 for h in history))
    assert calls or workers == 2  # the boosted model calls tools (seen with the local worker's seeds)
    assert sum(c["status"] == "malformed" for c in calls) == sum(h["multiturn/malformed_tool_calls"] for h in history)
