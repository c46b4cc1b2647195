"""`verl plan` under tensor parallelism: the per-rank parameter and activation formulas by hand."""

from __future__ import annotations

from verl.config import load_config
from verl.commands.plan import GIB, ModelShape, plan_memory

SHAPE = ModelShape(n_params=1_000_000, hidden=64, layers=2, kv_dim=32, intermediate=128, vocab=1000)
BLOCK = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)  # q, o; k, v; gate, up, down per layer


def test_split_parameters_and_activations_by_hand():
    assert SHAPE.block_params == BLOCK
    assert SHAPE.params_per_rank(4, 1) == 1_000_000 / 4
    # the split projections over all 4 ranks, the rest (embeddings, norms, head) over dp = 2
    assert SHAPE.params_per_rank(4, 2) == BLOCK / 4 + (1_000_000 - BLOCK) / 2
    # 2 layers * (4*64 + (2*64 + 2*32 + 4*128) / 2) values * 4 bytes
    assert SHAPE.activation_bytes_per_token(4, 2) == 2 * (256 + 704 / 2) * 4
    assert SHAPE.activation_bytes_per_token(4) == 7680  # tp = 1: unchanged


def test_plan_at_tp2_by_hand():
    base = [
        "trainer.n_gpus_per_node=4",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "data.max_prompt_length=6",
        "data.max_response_length=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.model.use_remove_padding=false",
    ]
    tp1 = plan_memory(load_config(None, base), 8 * GIB, 100.0, SHAPE)
    tp2 = plan_memory(
        load_config(
            None,
            [
                *base,
                "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size=2",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            ],
        ),
        8 * GIB,
        100.0,
        SHAPE,
    )
    share = BLOCK / 4 + (1_000_000 - BLOCK) / 2
    assert tp2.static["actor_params"] == share * 4 and tp2.static["actor_adam"] == 2 * share * 4
    assert tp1.static["rollout_copy"] == 4e6 and tp2.static["rollout_copy"] == (BLOCK / 2 + 1_000_000 - BLOCK) * 4
    # rows per data-parallel rank: 8 trajectories over dp = 2 (tp 2) vs 4 (tp 1): 40 vs 20 tokens of 10
    grads = share * 4
    tp2_update = tp2.stages["update_actor"] - grads
    tp1_update = tp1.stages["update_actor"] - 1e6
    assert tp2_update > tp1_update  # twice the rows per rank, not half the activations


def test_reference_at_the_actors_tp_holds_the_actors_share():
    base = [
        "trainer.n_gpus_per_node=4",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size=2",
    ]
    whole = plan_memory(load_config(None, base), 8 * GIB, 100.0, SHAPE)
    split = plan_memory(
        load_config(None, [*base, "actor_rollout_ref.ref.fsdp_config.tensor_parallel_size=2"]), 8 * GIB, 100.0, SHAPE
    )
    assert whole.static["ref_params"] == 1_000_000 / 4 * 4  # FSDP2 over the 4 ranks, fp32
    # the split projections over all 4 ranks, the rest over dp = 2
    assert split.static["ref_params"] == (BLOCK / 4 + (1_000_000 - BLOCK) / 2) * 4
