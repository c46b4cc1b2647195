"""`verl plan` (issue 14): the memory formulas by hand, device parsing, and a measured peak."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verl.config import load_config
from verl.commands.plan import (
    GIB,
    ModelShape,
    fused_head_applies,
    parse_device,
    plan_memory,
)

SHAPE = ModelShape(n_params=1_000_000, hidden=64, layers=2, kv_dim=32, intermediate=128, vocab=1000)


def test_activation_bytes_by_hand():
    # 2 layers * (6*64 + 2*32 + 4*128) = 2 * 960 values * 4 bytes
    assert SHAPE.activation_bytes_per_token(4) == 7680


def test_plan_static_and_stages_by_hand():
    cfg = load_config(
        None,
        [
            "data.train_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "data.max_prompt_length=6",
            "data.max_response_length=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.logprob_chunk_size=8",
            "actor_rollout_ref.model.use_remove_padding=false",
        ],
    )
    plan = plan_memory(cfg, device_bytes=8 * GIB, runtime_bytes=100.0, actor=SHAPE)
    assert plan.static == {"actor_params": 4e6, "actor_adam": 8e6}
    chunk = 2 * 8 * 1000 * 4
    # rollout: KV 2*2*32*(6+4)*4 rows*4 B + 7 * 4 rows * 1000 * 4 B
    assert plan.stages["rollout"] == 2 * 2 * 32 * 10 * 4 * 4 + 7 * 4 * 1000 * 4
    # log-prob forward, fused LM head (world size 1, no LoRA): one chunk of logits, no (K, V) logits
    assert plan.stages["log_prob"] == chunk / 2
    # update: grads 4e6 + 40 tokens * 7680 + the fused head's one (K, V) buffer 20 * 1000 * 4, no block
    assert plan.stages["update_actor"] == 4e6 + 40 * 7680 + 20 * 1000 * 4
    assert plan.peak == pytest.approx(100.0 + 12e6 + plan.stages["update_actor"]) and plan.fits
    assert plan.recommend["ppo_micro_batch_size_per_gpu"] == 4  # capped by the rows of one step


def test_plan_head_buffers_follow_the_fused_path():
    base = [
        "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "data.max_prompt_length=6",
        "data.max_response_length=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.logprob_chunk_size=8",
        "actor_rollout_ref.model.use_remove_padding=false",
    ]
    chunk = 2 * 8 * 1000 * 4
    recompute = load_config(None, [*base, "actor_rollout_ref.actor.logprob_head_recompute=true"])
    plan = plan_memory(recompute, device_bytes=8 * GIB, runtime_bytes=100.0, actor=SHAPE)
    assert plan.stages["update_actor"] == 4e6 + 40 * 7680 + chunk / 2  # no (K, V) buffer, one recomputed block
    unfused = load_config(None, base)
    assert fused_head_applies(unfused, 1) and not fused_head_applies(unfused, 2)


def test_parse_device():
    assert parse_device("gpu:80GiB") == ("gpu", 80 * GIB)
    assert parse_device("gpu:40GB") == ("gpu", 40e9)
    with pytest.raises(ValueError, match="gpu:<N>GiB"):
        parse_device("tpu")


@pytest.mark.e2e
def test_predicted_peak_within_20_percent_of_measured(tmp_path):
    """The built-in quick start: plan's prediction vs the bench's measured peak RSS."""
    overrides = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16"]
    plan = subprocess.run(
        [sys.executable, "-m", "verl.commands.plan", "--json", *overrides], capture_output=True, text=True, timeout=600
    )
    predicted = json.loads(plan.stdout)["peak"]
    out = tmp_path / "b.json"
    bench = subprocess.run(
        [sys.executable, "-m", "verl.commands.bench.bench", "--steps", "2", "--out", str(out), *overrides],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]
    measured = json.loads(out.read_text())["peak_rss_bytes"]
    assert abs(predicted - measured) / measured <= 0.2, (predicted, measured)


def test_recommendations_are_capped_at_what_one_step_uses():
    """On a device far larger than the run, the budget is the whole step, not millions of tokens."""
    from verl.config import load_config
    from verl.commands.plan import GIB, ModelShape, plan_memory

    cfg = load_config("quickstart")
    plan = plan_memory(cfg, 80 * GIB, 0.5 * GIB, ModelShape.from_path(cfg.actor_rollout_ref.model.path), None)
    rows = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n  # 256 trajectories, one rank
    seq = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert plan.recommend == {
        "ppo_max_token_len_per_gpu": rows * seq,
        "ppo_micro_batch_size_per_gpu": rows,
        "rollout.max_num_seqs": rows,
    }


def test_plan_divides_per_rank_activations_by_the_sequence_parallel_size():
    """world 2: sp=2 puts all 8 rows on one data-parallel rank, micro-batches of 2 rows, each rank
    holding half the columns: the activation and logit terms of sp=1's 2-row micro-batch, halved."""
    base = [
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "data.max_prompt_length=6",
        "data.max_response_length=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.logprob_chunk_size=8",
        "trainer.n_gpus_per_node=2",
        "algorithm.adv_estimator=grpo",
    ]
    sp1 = plan_memory(load_config(None, base), device_bytes=8 * GIB, runtime_bytes=100.0, actor=SHAPE)
    sp2 = plan_memory(
        load_config(None, [*base, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]),
        device_bytes=8 * GIB,
        runtime_bytes=100.0,
        actor=SHAPE,
    )
    assert sp2.static == sp1.static  # parameters stay sharded over the world
    grads = 4e6 / 2
    # unfused (FSDP2): 2 rows x 10 tokens x 7680 B + 2 rows x 4 scored x (2 x 1000 x 4) + two chunk
    # blocks of min(chunk 8, K) rows: 8 rows at sp=1, the 4 scored rows of a rank at sp=2
    assert sp1.stages["update_actor"] == grads + 20 * 7680 + 8 * 8000 + 2 * 8 * 1000 * 4
    assert sp2.stages["update_actor"] == grads + 10 * 7680 + 4 * 8000 + 2 * 4 * 1000 * 4
    # log-prob forward of all of a rank's rows: 4 rows (sp=1) vs 8 rows over 2 ranks: the same per rank
    assert sp2.stages["log_prob"] == sp1.stages["log_prob"]
    assert sp2.recommend["ppo_micro_batch_size_per_gpu"] == 8  # capped at the 8 rows of the one dp rank
