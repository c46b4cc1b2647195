"""How far vLLM's sampling log-probs are from the fp32 training forward, per engine dtype (CPU build).

Builds a random Llama of head size 32 (hidden 64, 2 layers, the built-in 100-token tokenizer's
vocabulary), starts ``rollout.name=vllm`` with ``rollout.dtype`` = float32 then bfloat16, syncs the
same fp32 weights, samples 64 responses of 16 tokens, and reports the max / mean absolute
difference of log-probs and ``training/rollout_probs_diff_*`` against the fp32 actor's forward.

Usage (vLLM venv): ``VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/bench_vllm_mismatch.py``
"""

from __future__ import annotations

import os
import sys

import torch


def measure(dtype: str) -> dict[str, float]:
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.algorithms.rollout_correction import rollout_mismatch_metrics
    from verl.config.schema import RolloutConfig
    from verl.modules.forward import compute_log_probs
    from verl.protocol import DataProto
    from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout

    cfg = AutoConfig.for_model(
        "llama",
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=256,
        max_position_embeddings=64,
        eos_token_id=2,
        pad_token_id=0,
        bos_token_id=1,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(std=0.3)
    engine = VLLMRollout(model, RolloutConfig(name="vllm", prompt_length=8, response_length=16, dtype=dtype), None)
    try:
        engine.update_weights(model)
        ids = torch.randint(4, 100, (64, 8), generator=torch.Generator().manual_seed(1))
        mask = torch.ones_like(ids)
        out = engine.generate_sequences(
            DataProto.from_dict(
                tensors={
                    "input_ids": ids,
                    "attention_mask": mask,
                    "position_ids": torch.arange(8).expand(64, 8),
                    "sample_seeds": torch.arange(64),
                }
            )
        )
    finally:
        engine.close()
    b = out.batch
    train = compute_log_probs(model, b["input_ids"], b["attention_mask"], b["position_ids"], 16)
    diff = (train - b["rollout_log_probs"]).abs() * b["response_mask"]
    stats = rollout_mismatch_metrics(train, b["rollout_log_probs"], b["response_mask"])
    return {
        "logprob_diff_max": float(diff.max()),
        "logprob_diff_mean": float(diff.sum() / b["response_mask"].sum()),
        **stats,
    }


def main() -> int:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    for dtype in ("float32", "bfloat16"):
        stats = measure(dtype)
        print(dtype, " ".join(f"{k}={v:.3g}" for k, v in stats.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
