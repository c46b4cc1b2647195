"""Per-row sampling seeds: a row's sample does not depend on its batch mates (1 vs N workers, resume)."""

from __future__ import annotations

import torch

from verl.workers.rollout.sampling import SamplingParams, row_generators, sample_tokens


def _params() -> SamplingParams:
    return SamplingParams(do_sample=True, temperature=1.0, top_k=-1, top_p=1.0)


def test_row_sample_independent_of_batch_composition():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    seeds = torch.tensor([11, 12, 13, 14, 15, 16])
    full, _ = sample_tokens(logits, _params(), None, row_generators(seeds))
    first, _ = sample_tokens(logits[:3], _params(), None, row_generators(seeds[:3]))
    second, _ = sample_tokens(logits[3:], _params(), None, row_generators(seeds[3:]))
    assert torch.equal(full, torch.cat([first, second]))
    again, _ = sample_tokens(logits, _params(), None, row_generators(seeds))
    assert torch.equal(full, again)


def test_inverse_cdf_never_picks_zero_probability_and_matches_distribution():
    logits = torch.full((4000, 5), float("-inf"))
    logits[:, 1], logits[:, 3] = 0.0, torch.log(torch.tensor(3.0))  # p = [0, .25, 0, .75, 0]
    tokens, logp = sample_tokens(logits, _params(), None, row_generators(torch.arange(4000)))
    assert set(tokens.tolist()) <= {1, 3}
    frac3 = (tokens == 3).float().mean().item()
    assert abs(frac3 - 0.75) < 0.03
    assert torch.allclose(logp[tokens == 3], torch.log(torch.tensor(0.75)), atol=1e-6)
