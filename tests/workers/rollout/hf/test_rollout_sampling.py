"""Sampling helpers of the hf engine (top-k / top-p, settings resolution) and the engine registry."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from torch import nn

from verl.config.schema import RolloutConfig, SamplingConfig
from verl.utils.registry import RegistryError
from verl.workers.rollout import (
    ROLLOUT_ENGINES,
    HFRollout,
    RolloutEngine,
    SamplingParams,
    build_rollout_engine,
    resolve_sampling,
    sample_tokens,
    top_k_top_p_filter,
)

NEG = float("-inf")


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs]).log()


def test_top_k_keeps_k_largest() -> None:
    out = top_k_top_p_filter(torch.tensor([[1.0, 4.0, 3.0, 2.0]]), top_k=2)
    assert out.tolist() == [[NEG, 4.0, 3.0, NEG]]
    assert top_k_top_p_filter(torch.tensor([[1.0, 2.0]]), top_k=-1).tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize(("top_p", "kept"), [(0.5, [1]), (0.6, [1, 2]), (0.8, [1, 2]), (0.81, [0, 1, 2]), (1e-9, [1])])
def test_top_p_keeps_smallest_set_reaching_p(top_p: float, kept: list[int]) -> None:
    """probs [0.2, 0.5, 0.3]: mass ranked above token 1 = 0, token 2 = 0.5, token 0 = 0.8."""
    out = top_k_top_p_filter(_logits([0.2, 0.5, 0.3]), top_p=top_p)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == kept


def test_top_k_then_top_p_on_renormalised_probs() -> None:
    # top_k=2 leaves [0.5, 0.3] -> renormalised [0.625, 0.375]; top_p 0.6 then keeps only token 1.
    out = top_k_top_p_filter(_logits([0.2, 0.5, 0.3]), top_k=2, top_p=0.6)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1]


def test_sample_tokens_log_prob_is_unfiltered_tempered() -> None:
    logits = _logits([0.2, 0.5, 0.3])
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_tokens(logits, SamplingParams(temperature=0.5, top_k=1), gen)
    assert tokens.tolist() == [1]
    # log softmax(log p / 0.5)[1] = log(0.25 / (0.04 + 0.25 + 0.09)), before the top-k filter.
    assert logp.item() == pytest.approx(math.log(0.25 / 0.38), abs=1e-6)
    tokens, logp = sample_tokens(logits, SamplingParams(do_sample=False, temperature=0.5), None)
    assert tokens.tolist() == [1] and logp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_sampling_frequencies_follow_filtered_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = _logits([0.1, 0.6, 0.3]).expand(4000, 3)
    tokens, _ = sample_tokens(logits, SamplingParams(top_p=0.8), gen)
    freq = torch.bincount(tokens, minlength=3).float() / 4000
    assert freq[0] == 0 and abs(freq[1].item() - 2 / 3) < 0.03  # nucleus {1, 2} renormalised: 2/3, 1/3


def test_resolve_sampling_config_meta_and_validation() -> None:
    cfg = RolloutConfig(
        temperature=0.7, top_k=50, top_p=0.9, val_kwargs=SamplingConfig(do_sample=True, temperature=0.3)
    )
    assert resolve_sampling(cfg, {}) == SamplingParams(True, 0.7, 50, 0.9)
    assert resolve_sampling(cfg, {"temperature": 1.2, "top_p": None}) == SamplingParams(True, 1.2, 50, 0.9)
    val = resolve_sampling(cfg, {"validate": True})
    assert val == SamplingParams(True, 0.3, -1, 1.0) and not val.greedy
    greedy = resolve_sampling(RolloutConfig(), {"validate": True})  # val_kwargs default: greedy
    assert greedy.greedy and greedy.logprob_temperature == 1.0
    assert SamplingParams(do_sample=True, temperature=0.0).greedy


def test_registry_hf_builds_engine_and_optional_engines_explain_install() -> None:
    assert {"hf", "vllm", "sglang"} <= set(ROLLOUT_ENGINES.names())
    lm = nn.Linear(2, 2)
    lm.generation_config = type("G", (), {"eos_token_id": [5, 6]})()
    engine = build_rollout_engine(lm, RolloutConfig(name="hf"), None)
    assert isinstance(engine, HFRollout) and isinstance(engine, RolloutEngine)
    assert engine.eos_token_id == [5, 6] and engine.pad_token_id == 5
    with pytest.raises(RegistryError, match="Did you mean 'vllm'"):
        build_rollout_engine(lm, RolloutConfig(name="vlm"))
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match=r"pip install 'verl\[vllm\]'"):
            build_rollout_engine(lm, RolloutConfig(name="vllm"))
    if importlib.util.find_spec("sglang") is None:
        with pytest.raises(ImportError, match=r"verl\[sglang\]"):
            build_rollout_engine(lm, RolloutConfig(name="sglang"))
