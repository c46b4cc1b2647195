"""`verl bench` (issue 14): FLOP counting by hand, summaries, the JSON record of a short run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from verl.trainer.bench import FlopModel, StepRecord, measure_matmul_peak, step_flops, summarize


def test_step_flops_by_hand():
    f = FlopModel(n_body=3_000_000, n_head=40_000_000)
    # gen: 2*3e6*1000 + 2*4e7*500 = 4.6e10; update: 6*3e6*1000 + 6*4e7*510 = 1.404e11
    assert step_flops(f, 1000, 500, 510, {"gen", "update_actor"}) == pytest.approx(1.864e11)
    # an old-log-prob pass adds 2*3e6*1000 + 2*4e7*510 = 4.68e10; a critic (body 1e6) forward + update 8e9
    assert step_flops(f, 1000, 500, 510, {"gen", "old_log_prob", "values", "update_critic", "update_actor"},
                      critic_body=1_000_000) == pytest.approx(1.864e11 + 4.68e10 + 2e9 + 6e9)


def test_flop_model_counts_a_tied_head_once():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    f = FlopModel.from_module(model)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields the tied weight once
    assert f.n_head == 32_000 and f.n_body == total - 32_000


def test_summary_medians_after_the_first_step_and_ray_share():
    recs = [StepRecord(seconds=s, generated_tokens=100, trained_tokens=300, flops=1e9,
                       stages={"step": s, "gen": 0.4 * s, "generate_sequences": 0.3 * s, "update_actor": 0.5 * s,
                               "update_actor_worker": 0.5 * s, "update_weights": 0.1 * s})
            for s in (10.0, 1.0, 2.0, 4.0)]
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
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.bench", "--steps", "2", "--out", str(out),
                           "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "throughput" in proc.stdout and "% of the FLOP bound" in proc.stdout
    record = json.loads(out.read_text())
    s = record["summary"]
    assert s["throughput"] > 0 and 0 < s["pct_of_bound"] < 100 and record["peak_rss_bytes"] > 100 * 2**20
    assert len(record["steps_detail"]) == 2 and "stage_s/gen" in s and torch.isfinite(torch.tensor(s["flops"]))
