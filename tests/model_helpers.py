"""Tiny random causal LMs for rollout and engine tests (imported as ``from model_helpers import ...``).

Every model is built from a transformers config with a fixed seed, ``eos_token_id=2`` and
``pad_token_id=0``, and its ``lm_head`` is redrawn with std 0.5: sharper distributions than the
0.02-std init, so greedy paths differ between prompts and seeds. Returned in eval mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

# a 2-layer GQA decoder (4 query heads of size 8, 2 KV heads) for the hf engine
DECODER = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)
# vLLM's CPU attention takes head size 32 (not 8 or 16): 2 query heads of 32, 1 KV head
VLLM_DECODER = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    intermediate_size=128,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    bos_token_id=1,
)
GPT2 = dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def tiny_causal_lm(arch: str = "qwen2", seed: int = 0, vocab_size: int = 128, **config: Any) -> nn.Module:
    """A random ``arch`` model (``qwen2``, ``llama``, ``mistral``, ... with `DECODER`'s sizes;
    ``gpt2`` with `GPT2`'s); ``config`` overrides or adds config fields (``attn_implementation``)."""
    sizes = GPT2 if arch == "gpt2" else DECODER
    cfg = AutoConfig.for_model(arch, vocab_size=vocab_size, eos_token_id=2, pad_token_id=0, **{**sizes, **config})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.lm_head.weight.normal_(std=0.5)
    return model.eval()


def tiny_vllm_lm(seed: int = 0, vocab_size: int = 128) -> nn.Module:
    """A random Llama with `VLLM_DECODER`'s sizes, which vLLM's CPU build can serve."""
    return tiny_causal_lm("llama", seed, vocab_size, **VLLM_DECODER)
