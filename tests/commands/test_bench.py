"""`verl bench` (issue 14): FLOP counting by hand, summaries, the JSON record of a short run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from verl.commands.bench.bench import (
    FlopModel,
    StepRecord,
    measure_matmul_peak,
    step_flops,
    summarize,
)
from verl.commands.bench.measure import (
    LinearShape,
    attainable_seconds,
    measure_linear_throughput,
    part_shapes,
    step_flop_parts,
)


def test_step_flops_by_hand():
    f = FlopModel(n_body=3_000_000, n_head=40_000_000)
    # gen: 2*3e6*1000 + 2*4e7*500 = 4.6e10; update: 6*3e6*1000 + 6*4e7*510 = 1.404e11
    assert step_flops(f, 1000, 500, 510, {"gen", "update_actor"}) == pytest.approx(1.864e11)
    # an old-log-prob pass adds 2*3e6*1000 + 2*4e7*510 = 4.68e10; a critic (body 1e6) forward + update 8e9
    assert step_flops(
        f, 1000, 500, 510, {"gen", "old_log_prob", "values", "update_critic", "update_actor"}, critic_body=1_000_000
    ) == pytest.approx(1.864e11 + 4.68e10 + 2e9 + 6e9)


def test_step_flop_parts_by_hand_sum_to_step_flops():
    f = FlopModel(n_body=3_000_000, n_head=40_000_000)
    parts = step_flop_parts(f, 1000, 500, 510, {"gen", "update_actor"})
    # prefill 2*3e6*500, decode body 2*3e6*500, decode head 2*4e7*500, train 6*3e6*1000 + 6*4e7*510
    assert parts == pytest.approx(
        {"prefill_body": 3e9, "decode_body": 3e9, "decode_head": 4e10, "train_body": 1.8e10, "train_head": 1.224e11}
    )
    stages = {"gen", "old_log_prob", "ref", "values", "update_critic", "update_actor"}
    parts = step_flop_parts(f, 1000, 500, 510, stages, ppo_epochs=2, critic_body=1_000_000)
    assert parts["score_head"] == pytest.approx(2 * 2 * 4e7 * 510) and parts["critic_train"] == pytest.approx(6e9)
    assert sum(parts.values()) == pytest.approx(step_flops(f, 1000, 500, 510, stages, 2, 1_000_000))


def test_attainable_bound_arithmetic():
    assert attainable_seconds({"a": 2e9, "b": 1e9}, {"a": 1e9, "b": 5e8, "c": 1.0}) == pytest.approx(4.0)
    with pytest.raises(KeyError):
        attainable_seconds({"a": 1.0}, {})
    f = FlopModel(n_body=3, n_head=4, hidden=256, intermediate=768, vocab=151936)
    shapes = part_shapes(f, tokens=3700, response_tokens=1024, padded_rows=1040, decode_rows=16, micro_batches=2)
    assert shapes["decode_head"] == LinearShape(16, 256, 151936)
    assert shapes["train_head"] == LinearShape(520, 256, 151936, train=True)
    assert shapes["prefill_body"] == LinearShape(2676, 256, 768) and shapes["train_body"].rows == 1850
    assert LinearShape(2, 3, 5, train=True).flops == 3 * 2 * 2 * 3 * 5
    # a step of 4 s with 1 s attainable is 25 % of the attainable bound; the FLOP bound is separate
    recs = [
        StepRecord(seconds=4.0, generated_tokens=1, trained_tokens=1, flops=4e9, flop_parts={"a": 2e9, "b": 1e9})
    ] * 2
    s = summarize(recs, peak_flops=2e9, shape_throughput={"a": 4e9, "b": 2e9})
    assert s["attainable_s"] == pytest.approx(1.0) and s["pct_of_attainable"] == pytest.approx(25.0)
    assert s["pct_of_bound"] == pytest.approx(50.0)
    assert "attainable_s" not in summarize(recs, peak_flops=2e9)


def test_linear_throughput_is_measured():
    fwd = measure_linear_throughput(LinearShape(8, 32, 64), repeats=2, min_seconds=0.01)
    train = measure_linear_throughput(LinearShape(8, 32, 64, train=True), repeats=2, min_seconds=0.0)
    assert 1e5 < fwd < 1e15 and 1e5 < train < 1e15


def test_flop_model_counts_a_tied_head_once():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    f = FlopModel.from_module(model)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields the tied weight once
    assert f.n_head == 32_000 and f.n_body == total - 32_000
    assert (f.hidden, f.intermediate, f.vocab) == (32, 64, 1000)


def test_summary_medians_after_the_first_step_and_ray_share():
    recs = [
        StepRecord(
            seconds=s,
            generated_tokens=100,
            trained_tokens=300,
            flops=1e9,
            stages={
                "step": s,
                "gen": 0.4 * s,
                "generate_sequences": 0.3 * s,
                "update_actor": 0.5 * s,
                "update_actor_worker": 0.5 * s,
                "update_weights": 0.1 * s,
            },
        )
        for s in (10.0, 1.0, 2.0, 4.0)
    ]
    s = summarize(recs, peak_flops=1e9)
    assert s["steps"] == 3 and s["step_s"] == 2.0 and s["throughput"] == pytest.approx(400 / 2.0)
    assert s["pct_of_bound"] == pytest.approx(50.0)  # 1 s of work at peak in a 2 s step
    assert s["dispatch_s"] == pytest.approx(0.2) and s["ray_share_pct"] == pytest.approx(20.0)


def test_matmul_peak_is_measured():
    peak = measure_matmul_peak(size=128, repeats=3)
    assert 1e6 < peak < 1e15


@pytest.mark.e2e
def test_bench_writes_a_record(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.commands.bench.bench",
            "--steps",
            "2",
            "--out",
            str(out),
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "throughput" in proc.stdout and "% of the FLOP bound" in proc.stdout
    assert "% of the attainable bound" in proc.stdout
    record = json.loads(out.read_text())
    s = record["summary"]
    assert s["throughput"] > 0 and 0 < s["pct_of_bound"] < 100 and record["peak_rss_bytes"] > 100 * 2**20
    assert 0 < s["pct_of_attainable"] and set(record["shape_throughput"]) >= {"decode_head", "train_head"}
    assert len(record["steps_detail"]) == 2 and "stage_s/gen" in s and torch.isfinite(torch.tensor(s["flops"]))


def test_trl_peer_gets_verls_kl_loss():
    """The TRL peer mirrors the KL loss (k3 = TRL's estimator), so both sides do the same work."""
    from verl.config import load_config
    from verl.commands.bench.trl import kl_beta

    assert kl_beta(load_config("quickstart").actor_rollout_ref.actor) == 0.5  # the quick start's k3 KL loss
    assert (
        kl_beta(load_config("quickstart", ["actor_rollout_ref.actor.use_kl_loss=false"]).actor_rollout_ref.actor) == 0.0
    )
    with pytest.raises(ValueError, match="kl_loss_type='kl'"):
        kl_beta(load_config("quickstart", ["actor_rollout_ref.actor.kl_loss_type=kl"]).actor_rollout_ref.actor)
