"""Precomputed per-row uniforms sample exactly what per-step generator draws sample (issue 14)."""

from __future__ import annotations

import torch

from verl.workers.rollout.sampling import (
    SamplingParams,
    row_generators,
    row_uniforms,
    sample_tokens,
    top_k_top_p_filter,
)


def test_row_uniforms_equal_per_step_draws():
    seeds = torch.tensor([3, 2**62 + 5, 0, 123456789])
    u = row_uniforms(seeds, 70)
    gens = row_generators(seeds)
    per_step = torch.stack([torch.stack([torch.rand((), generator=g) for g in gens]) for _ in range(70)], dim=1)
    assert u.shape == (4, 70) and torch.equal(u, per_step)


def test_sampling_with_uniform_columns_equals_generators():
    torch.manual_seed(1)
    seeds = torch.arange(8) * 31 + 7
    for params in (
        SamplingParams(),
        SamplingParams(top_k=4),
        SamplingParams(top_p=0.7),
        SamplingParams(temperature=0.6),
    ):
        gens, u = row_generators(seeds), row_uniforms(seeds, 5)
        for t in range(5):
            logits = torch.randn(8, 40)
            a_tok, a_lp = sample_tokens(logits, params, None, gens)
            b_tok, b_lp = sample_tokens(logits.clone(), params, None, u[:, t])
            assert torch.equal(a_tok, b_tok) and torch.equal(a_lp, b_lp)


def test_filter_is_a_no_copy_when_off_and_does_not_touch_the_input_otherwise():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    assert top_k_top_p_filter(logits) is logits
    out = top_k_top_p_filter(logits, top_k=1)
    assert out is not logits and torch.equal(logits, torch.tensor([[1.0, 3.0, 2.0]]))
    assert torch.equal(out, torch.tensor([[float("-inf"), 3.0, float("-inf")]]))


def test_sample_tokens_leaves_callers_logits_unchanged():
    logits = torch.randn(3, 10)
    before = logits.clone()
    sample_tokens(logits, SamplingParams(top_k=2, top_p=0.5), None, row_generators(torch.arange(3)))
    assert torch.equal(logits, before)
