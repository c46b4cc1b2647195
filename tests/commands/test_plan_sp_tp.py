"""`verl plan` with Ulysses SP and tensor parallelism together (sp=2, tp=2 on 4 ranks, dp=1): the
per-rank parameter, activation, logit and rollout terms by hand."""

from __future__ import annotations

import pytest

from verl.config import load_config
from verl.commands.plan import GIB, ModelShape, plan_memory

SHAPE = ModelShape(n_params=1_000_000, hidden=64, layers=2, kv_dim=32, intermediate=128, vocab=1000)
BLOCK = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)  # 73728: q, o; k, v; gate, up, down per layer
BASE = [
    "trainer.n_gpus_per_node=4",
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "data.max_prompt_length=6",
    "data.max_response_length=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.logprob_chunk_size=8",
    "actor_rollout_ref.model.use_remove_padding=true",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size=2",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
]
SHARE = BLOCK / 4 + (1_000_000 - BLOCK) / 2  # projections over the 4 ranks, the rest over dp x sp = 2: 481568
ACT = 2 * (4 * 64 + (2 * 64 + 2 * 32 + 4 * 128) / 2) * 4  # 4864 B per token: norms whole, the rest / tp


def test_plan_at_sp2_tp2_by_hand():
    plan = plan_memory(load_config(None, BASE), 8 * GIB, 100.0, SHAPE)
    assert plan.static == {
        "actor_params": SHARE * 4,
        "actor_adam": 2 * SHARE * 4,
        "rollout_copy": (BLOCK / 2 + 1_000_000 - BLOCK) * 4,
    }
    # the 8 trajectories on the one data-parallel rank; a 2-row micro-batch packs 20 tokens, 8 scored:
    # 10 tokens and 4 scored positions per rank; unfused head (FSDP2): logits + gradient 2 x 1000 x 4 B
    # per scored position, two blocks of min(chunk 8, 4) rows
    assert plan.stages["update_actor"] == SHARE * 4 + 10 * ACT + 4 * 8000 + 2 * 4 * 1000 * 4
    # log-prob forward of all 8 rows (32 scored) split over sp: 16 scored logits + two 8-row blocks
    assert plan.stages["log_prob"] == 16 * 1000 * 4 + 2 * 8 * 1000 * 4
    # rollout: 8 // 4 = 2 rows per rank, KV 2 x 2 x 32 x 10 x 2 x 4 B; the TP group's 2 x 2 rows' sampling logits
    assert plan.stages["rollout"] == 2 * 2 * 32 * 10 * 2 * 4 + 7 * 2 * 2 * 1000 * 4
    assert plan.peak == pytest.approx(100.0 + sum(plan.static.values()) + plan.stages["update_actor"])
    # token budget capped at the rank's 8 rows x 10 tokens / sp; micro-batch rows = budget x sp / 10
    assert plan.recommend["ppo_max_token_len_per_gpu"] == 40 and plan.recommend["ppo_micro_batch_size_per_gpu"] == 8


def test_plan_critic_at_sp2_tp2_uses_its_own_rows():
    gae = [*BASE, "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=4", "critic.model.use_remove_padding=true"]
    split = plan_memory(
        load_config(
            None, [*gae, "critic.ulysses_sequence_parallel_size=2", "critic.model.fsdp_config.tensor_parallel_size=2"]
        ),
        8 * GIB,
        100.0,
        SHAPE,
        SHAPE,
    )
    whole = plan_memory(load_config(None, gae), 8 * GIB, 100.0, SHAPE, SHAPE)
    # split: all 8 rows on its one dp rank (80 tokens), 1 / sp per rank, activations / tp
    assert split.stages["update_critic"] == SHARE * 4 + 40 * ACT
    assert split.static["critic_params_adam"] == 3 * SHARE * 4
    # sp = tp = 1: 2 rows per rank of 4 (20 tokens), whole activations, FSDP2 over the world
    assert whole.stages["update_critic"] == 1_000_000 + 20 * 7680
