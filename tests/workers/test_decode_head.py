"""`verl.workers.rollout.decode_head`: the eager decode step's LM head in the faster matmul layout.

Whichever layout is measured faster, the rollout must sample the same tokens with the same
log-probs up to float32 summation order: the `(W @ hᵀ)ᵀ` logits equal ``F.linear``'s bit for bit
here, but the model's own head (a `(B, 1, H)` input) sums in another order; rollout log-probs
differed by at most 2.4e-6 (greedy 1.9e-6, τ = 1 9.5e-7, τ = 0.7 / top-p 0.9 2.4e-6).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from tests.workers.test_rollout_compile import PROMPTS, _prompts
from verl.config.schema import RolloutConfig
from verl.workers.rollout import HFRollout
from verl.workers.rollout import decode_head as dh

VOCAB = 151_936  # a Qwen-size vocabulary: 151,936 x 32 = 4.9M head weights >= MIN_HEAD_ELEMENTS


def _qwen_vocab_lm() -> nn.Module:
    cfg = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               num_key_value_heads=1, intermediate_size=64, max_position_embeddings=64,
                               tie_word_embeddings=False, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.lm_head.weight.normal_(std=0.5)  # peaked distributions: greedy paths vary between rows
    return model.eval()


def test_both_layouts_give_the_same_logits():
    g = torch.Generator().manual_seed(0)
    w, h = torch.randn(VOCAB, 32, generator=g), torch.randn(16, 32, generator=g)
    assert torch.equal(dh._weight_major(w, h), torch.nn.functional.linear(h, w))
    assert dh._weight_major(w, h).is_contiguous()


def test_layout_choice_is_measured_once_per_shape(monkeypatch):
    monkeypatch.setattr(dh, "_WEIGHT_MAJOR", {})
    calls = []
    monkeypatch.setattr(dh, "_best_seconds", lambda fn, repeats=3: calls.append(fn) or (1.0 if len(calls) % 2 else 0.5))
    w = torch.zeros(8, 4)
    assert dh.weight_major_is_faster(w, 3) is True  # 0.5 s < 0.9 x 1.0 s
    assert dh.weight_major_is_faster(w, 3) is True and len(calls) == 2  # cached: no new measurement
    monkeypatch.setattr(dh, "_best_seconds", lambda fn, repeats=3: 1.0)
    assert dh.weight_major_is_faster(w, 5) is False  # a tie keeps the model's own layout


def test_which_models_get_the_decode_head():
    model = _qwen_vocab_lm()
    assert dh.decode_head(model) is model.lm_head
    small = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "qwen2", vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64))
    assert dh.decode_head(small) is None  # 4k weights: the layout cannot matter
    assert dh.decode_head(model.to(torch.bfloat16)) is None  # float32 only


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}])
def test_rollout_is_the_same_in_either_layout(monkeypatch, sampling):
    model = _qwen_vocab_lm()
    outs = []
    for weight_major in (False, True):
        monkeypatch.setattr(dh, "weight_major_is_faster", lambda weight, rows, wm=weight_major: wm)
        engine = HFRollout(model, RolloutConfig(response_length=6, **sampling), eos_token_id=[VOCAB - 1], pad_token_id=0)
        prompts = _prompts(PROMPTS, seeds=True)
        prompts.meta_info["do_sample"] = sampling["temperature"] > 0
        outs.append(engine.generate_sequences(prompts))
    a, b = outs
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    diff = float((a.batch["rollout_log_probs"] - b.batch["rollout_log_probs"]).abs().max())
    print("max abs diff of rollout log-probs between layouts:", diff)
    assert diff <= 1e-5, diff


def test_the_eager_decode_step_uses_the_head(monkeypatch):
    """The replaced head really runs in the decode step (and the model's own head does not)."""
    model = _qwen_vocab_lm()
    used = []
    monkeypatch.setattr(dh, "weight_major_is_faster", lambda weight, rows: used.append(rows) or True)
    own = []
    model.lm_head.register_forward_hook(lambda *a: own.append(1))
    engine = HFRollout(model, RolloutConfig(response_length=4, temperature=0.0), eos_token_id=[VOCAB - 1], pad_token_id=0)
    engine.generate_sequences(_prompts(PROMPTS))
    assert used == [len(PROMPTS)] * 3  # 4 tokens: 1 from the prefill, 3 decode steps
    assert own == [1]  # only the prefill runs the model's own head
