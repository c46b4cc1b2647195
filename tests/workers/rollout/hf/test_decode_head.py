"""`verl.workers.rollout.hf.decode_head`: the eager decode step's LM head in the faster matmul layout.

Whichever layout is measured faster, the rollout must sample the same tokens as the model's own
forward, with the same log-probs up to float32 summation order (another BLAS kernel sums each
logit's dot product in another order). Measured on 1-layer random Qwen2 / GPT-2 models with a
151,936-token head of std 1 (peaked distributions, so no sampled token is a near-tie): at most
7.9e-6 (weight-major layout), 0.0 (``F.linear`` layout); the tests allow 2e-5.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from tests.workers.rollout.hf.test_rollout_compile import PROMPTS, _prompts
from verl.config.schema import RolloutConfig
from verl.workers.rollout import HFRollout
from verl.workers.rollout.hf import decode_head as dh

VOCAB = 151_936  # a Qwen-size vocabulary: 151,936 x 32 = 4.9M head weights >= MIN_HEAD_ELEMENTS


def _vocab_lm(arch: str = "qwen2") -> nn.Module:
    """A 1-layer random model of ``arch`` with a Qwen-size vocabulary and hidden size 32."""
    common = {"vocab_size": VOCAB, "eos_token_id": 2, "pad_token_id": 0, "attn_implementation": "sdpa"}
    if arch == "gpt2":
        cfg = AutoConfig.for_model("gpt2", n_embd=32, n_layer=1, n_head=2, n_positions=64, **common)
    else:
        extra = {"logits_scaling": 8.0} if arch == "granite" else {}
        cfg = AutoConfig.for_model(
            arch,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            max_position_embeddings=64,
            tie_word_embeddings=False,
            **common,
            **extra,
        )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.get_output_embeddings().weight.normal_(std=1.0)  # peaked: no sampled token is a near-tie
    return model.eval()


def test_both_layouts_give_the_same_logits():
    g = torch.Generator().manual_seed(0)
    w, h = torch.randn(VOCAB, 32, generator=g), torch.randn(16, 32, generator=g)
    assert torch.equal(dh._weight_major(w, h), torch.nn.functional.linear(h, w))
    assert dh._weight_major(w, h).is_contiguous()


def test_layout_choice_is_measured_once_per_shape(monkeypatch):
    monkeypatch.setattr(dh, "_WEIGHT_MAJOR", {})
    calls = []
    monkeypatch.setattr(dh, "best_seconds", lambda fn: calls.append(fn) or (1.0 if len(calls) % 2 else 0.5))
    w = torch.zeros(8, 4)
    assert dh.weight_major_is_faster(w, 3) is True  # 0.5 s < 0.9 x 1.0 s
    assert dh.weight_major_is_faster(w, 3) is True and len(calls) == 2  # cached: no new measurement
    monkeypatch.setattr(dh, "best_seconds", lambda fn: 1.0)
    assert dh.weight_major_is_faster(w, 5) is False  # a tie keeps the model's own layout


def test_which_models_get_the_decode_head():
    model = _vocab_lm()
    assert dh.decode_head(model) is model.lm_head
    small = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(
            "qwen2",
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        )
    )
    assert dh.decode_head(small) is None  # 4k weights: the layout cannot matter
    assert dh.decode_head(model.to(torch.bfloat16)) is None  # float32 only


@pytest.mark.parametrize("arch", ["qwen2", "gpt2", "granite"])
@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}])
def test_rollout_equals_the_models_own_head_in_either_layout(monkeypatch, arch, sampling):
    """Against the model's own forward (the decode head switched off): same tokens, log-probs
    within 2e-5, in both layouts. Granite divides its logits by ``logits_scaling`` after the head,
    so it must keep its own head (and does: `decode_head` returns None)."""
    model = _vocab_lm(arch)
    assert (dh.decode_head(model) is None) == (arch == "granite")

    def rollout():
        engine = HFRollout(
            model, RolloutConfig(response_length=6, **sampling), eos_token_id=[VOCAB - 1], pad_token_id=0
        )
        prompts = _prompts(PROMPTS, seeds=True)
        prompts.meta_info["do_sample"] = sampling["temperature"] > 0
        return engine.generate_sequences(prompts)

    with monkeypatch.context() as mp:
        mp.setattr(dh, "MIN_HEAD_ELEMENTS", 1 << 62)  # no head qualifies: the model's own forward
        own = rollout()
    for weight_major in (False, True):
        monkeypatch.setattr(dh, "weight_major_is_faster", lambda weight, rows, wm=weight_major: wm)
        out = rollout()
        assert torch.equal(out.batch["responses"], own.batch["responses"]), weight_major
        diff = float((out.batch["rollout_log_probs"] - own.batch["rollout_log_probs"]).abs().max())
        print(
            arch, sampling, "weight-major" if weight_major else "linear", "max abs diff vs the model's own head:", diff
        )
        assert diff <= 2e-5, diff


def test_the_eager_decode_step_uses_the_head(monkeypatch):
    """The replaced head really runs in the decode step (and the model's own head does not)."""
    model = _vocab_lm()
    used = []
    monkeypatch.setattr(dh, "weight_major_is_faster", lambda weight, rows: used.append(rows) or True)
    own = []
    model.lm_head.register_forward_hook(lambda *a: own.append(1))
    engine = HFRollout(
        model, RolloutConfig(response_length=4, temperature=0.0), eos_token_id=[VOCAB - 1], pad_token_id=0
    )
    engine.generate_sequences(_prompts(PROMPTS))
    assert used == [len(PROMPTS)] * 3  # 4 tokens: 1 from the prefill, 3 decode steps
    assert own == [1]  # only the prefill runs the model's own head
