"""Compiled decode step of the ``hf`` engine (``rollout.enforce_eager=false``) against eager decode.

The attention tests are fast. The compile tests are ``e2e`` (Inductor compiles the decode step of
a tiny GQA Qwen2 once per process, tens of seconds on a loaded 2-core CPU; the tests share it).

Measured tolerance (tiny Qwen2, hidden 32, 2 layers, 4 query / 2 KV heads, vocabulary 128, fp32,
this CPU): rollout log-probs of compiled vs eager decode differed by at most 1.7e-6 (greedy 7e-7,
sampling at τ = 1 1e-6, τ = 0.7 with top-p 0.9 1.7e-6; Inductor's
fused kernels sum in another order); the tests allow 1e-5. Greedy tokens and per-row-seeded
sampled tokens were identical; a token can only flip where two cumulative probabilities are
within rounding of the uniform draw, which a random model with a 151,936-token vocabulary and
near-uniform logits hits often (benchmarks/README.md), a trained model rarely.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import tiny_causal_lm
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from verl.config.schema import RolloutConfig
from verl.modules.forward import position_ids_from_attention_mask
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.hf.hf_decode import DecodeStep, decode_sdpa_attention

VOCAB, RESPONSE = 128, 8
LOGP_ATOL = 1e-5


def _tiny_gqa_lm(seed: int = 0) -> nn.Module:
    return tiny_causal_lm(seed=seed, vocab_size=VOCAB, attn_implementation="sdpa")


def _prompts(rows: list[list[int]], seeds: bool = False) -> DataProto:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)}
    if seeds:
        tensors["sample_seeds"] = torch.arange(len(rows), dtype=torch.long) + 17
    return DataProto.from_dict(
        tensors=tensors, non_tensors={"uid": np.array([str(i) for i in range(len(rows))], dtype=object)}
    )


def _engine(model: nn.Module, compiled: bool, **cfg: object) -> HFRollout:
    cfg.setdefault("response_length", RESPONSE)
    return HFRollout(model, RolloutConfig(enforce_eager=not compiled, **cfg), eos_token_id=[VOCAB - 1], pad_token_id=0)


PROMPTS = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33], [41, 42, 43, 44]]


# ------------------------------------------------------------------------------ attention (fast)
@pytest.mark.parametrize("mask_heads", [1, 4])
def test_decode_attention_equals_transformers_sdpa(mask_heads: int) -> None:
    """Eager, one-token GQA query: the folded attention is transformers' own (pack_gqa) bit for bit."""
    module = nn.Module()
    module.num_key_value_groups = 2
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 1, 8, generator=g)
    k, v = torch.randn(3, 2, 10, 8, generator=g), torch.randn(3, 2, 10, 8, generator=g)
    mask = torch.rand(3, mask_heads, 1, 10, generator=g) > 0.3
    mask[..., 0] = True
    ours, _ = decode_sdpa_attention(module, q, k, v, mask, scaling=0.35)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.35)
    assert ours.shape == (3, 1, 4, 8)
    assert torch.equal(ours, ref)
    # against plain attention with the KV heads repeated (head h reads KV head h // 2)
    logits = (q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)) * 0.35
    probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    assert torch.allclose(ours, (probs @ v.repeat_interleave(2, dim=1)).transpose(1, 2), atol=1e-6)


def test_decode_attention_passes_prefill_through() -> None:
    module = nn.Module()
    module.num_key_value_groups = 2
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    ours, _ = decode_sdpa_attention(module, q, k, v, None, scaling=0.3, is_causal=True)
    ref, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.3, is_causal=True)
    assert torch.equal(ours, ref)


def test_session_switches_attention_only_when_compiled_and_restores_it() -> None:
    model = _tiny_gqa_lm()
    with DecodeStep(False).session(model):
        assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="boom"), DecodeStep(True).session(model):
        assert model.config._attn_implementation == "verl_decode_sdpa"
        assert model.model.layers[0].self_attn.config._attn_implementation == "verl_decode_sdpa"
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_compiled_decode_needs_the_static_cache() -> None:
    with pytest.raises(ValueError, match="cache_implementation=static"):
        _engine(_tiny_gqa_lm(), True, engine_kwargs={"cache_implementation": "dynamic"})


# ------------------------------------------------------------------------- compiled (e2e tier)
@pytest.fixture(scope="module")
def model() -> nn.Module:
    return _tiny_gqa_lm()


@pytest.mark.e2e
def test_compiled_greedy_decode_equals_eager(model: nn.Module) -> None:
    batch = _prompts(PROMPTS)
    eager = _engine(model, False, do_sample=False).generate_sequences(batch)
    compiled = _engine(model, True, do_sample=False).generate_sequences(batch)
    assert torch.equal(compiled.batch["responses"], eager.batch["responses"])
    assert torch.equal(compiled.batch["response_mask"], eager.batch["response_mask"])
    diff = (compiled.batch["rollout_log_probs"] - eager.batch["rollout_log_probs"]).abs().max()
    assert float(diff) <= LOGP_ATOL
    assert model.config._attn_implementation == "sdpa"  # restored after generation


@pytest.mark.e2e
@pytest.mark.parametrize("sampling", [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}])
def test_compiled_sampling_equals_eager_within_tolerance(model: nn.Module, sampling: dict) -> None:
    batch = _prompts(PROMPTS, seeds=True)
    eager = _engine(model, False, **sampling).generate_sequences(batch)
    compiled = _engine(model, True, **sampling).generate_sequences(batch)
    assert torch.equal(compiled.batch["responses"], eager.batch["responses"])
    assert torch.allclose(compiled.batch["rollout_log_probs"], eager.batch["rollout_log_probs"], atol=LOGP_ATOL, rtol=0)


@pytest.mark.e2e
def test_compiled_decode_reuses_its_graph_and_follows_weight_updates(model: nn.Module) -> None:
    """New prompt lengths, batch sizes (> 1: Dynamo specialises sizes 0 and 1) and in-place weight
    updates never recompile (dynamic shapes; parameters are graph inputs), and the compiled step
    reads the updated weights."""
    _engine(model, True, do_sample=False).generate_sequences(_prompts(PROMPTS))  # compiled (or cached)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    for rows in ([[5, 6, 7, 8, 9, 10, 11], [3, 4]], PROMPTS[:3] + [[1, 2, 3, 4, 5, 6, 7, 8, 9]] + PROMPTS[:2]):
        batch = _prompts(rows)
        eager = _engine(model, False, do_sample=False).generate_sequences(batch)
        with torch._dynamo.config.patch(error_on_recompile=True):
            compiled = _engine(model, True, do_sample=False, max_num_seqs=3).generate_sequences(batch)  # 3 + 3 rows
        assert torch.equal(compiled.batch["responses"], eager.batch["responses"])
        assert torch.allclose(compiled.batch["rollout_log_probs"], eager.batch["rollout_log_probs"], atol=LOGP_ATOL)


@pytest.mark.e2e
def test_agent_loop_server_path_uses_the_same_compiled_step(model: nn.Module) -> None:
    """The agent-loop server calls the engine's batch decode directly: same tokens as eager, and the
    graph compiled for `generate_sequences` serves it (the attention switch applies there too)."""
    from verl.workers.rollout.hf.hf_server import HFTokenServer
    from verl.workers.rollout.request import TokenRequest
    from verl.workers.rollout.sampling import SamplingParams

    _engine(model, True, do_sample=False).generate_sequences(_prompts(PROMPTS))  # compiled (or cached)
    requests = [
        TokenRequest(prompt_ids=p, sampling=SamplingParams(do_sample=False), max_new_tokens=5) for p in PROMPTS[:2]
    ]
    eager = HFTokenServer(_engine(model, False)).generate_batch(requests)
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = HFTokenServer(_engine(model, True)).generate_batch(requests)
    assert [o.token_ids for o in compiled] == [o.token_ids for o in eager]
    assert np.allclose([o.log_probs for o in compiled], [o.log_probs for o in eager], atol=LOGP_ATOL)
    assert model.config._attn_implementation == "sdpa"
