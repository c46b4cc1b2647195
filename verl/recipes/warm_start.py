"""Init a built-in spec's Llama and warm-start it with the product's SFT trainer (``verl sft``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PROMPT_RESPONSE_KEYS", "init_model", "sft_overrides", "warm_start"]

PROMPT_RESPONSE_KEYS = ("data.prompt_key=prompt", "data.response_key=response")
# How ``verl sft`` reads {prompt, response} rows (multi-turn recipes pass their own keys).


def init_model(spec: Any, tok: Any) -> Any:
    """A tied-embedding ``LlamaForCausalLM`` of the spec's shape, initialised with ``spec.init_seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(spec.init_seed)
    return LlamaForCausalLM(config)


def sft_overrides(
    spec: Any, init_dir: Path, data: Path, work: Path, data_keys: Sequence[str] = PROMPT_RESPONSE_KEYS
) -> list[str]:
    """A spec's SFT recipe in ``verl sft`` keys (field names of `verl.modules.builtin.BuiltinModelSpec`)."""
    return [
        f"model.partial_pretrain={init_dir}",
        f"data.train_files=[{data}]",
        *data_keys,
        f"data.train_batch_size={spec.sft_batch_size}",
        f"data.micro_batch_size_per_gpu={spec.sft_batch_size}",
        f"data.max_length={spec.max_position_embeddings}",
        f"trainer.total_training_steps={spec.sft_steps}",
        f"optim.lr={spec.sft_lr}",
        "optim.betas=[0.9,0.99]",
        "optim.weight_decay=0.0",
        f"optim.lr_warmup_steps={spec.sft_warmup_steps}",
        "optim.lr_scheduler=cosine",
        "optim.clip_grad=1.0",
        f"trainer.seed={spec.sft_seed}",
        "trainer.logger=[]",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={work / 'ckpt'}",
        f"trainer.output_dir={work / 'out'}",
    ]


def warm_start(
    spec: Any, tok: Any, work: Path, rows: Sequence[dict[str, Any]], data_keys: Sequence[str] = PROMPT_RESPONSE_KEYS
) -> tuple[Any, float]:
    """Init, then warm-start with the product's SFT trainer; returns (model in eval mode, last step's SFT loss).

    Args:
        spec: a built-in spec (architecture and ``sft_*`` fields).
        tok: the model's tokenizer (saved next to the initial weights).
        work: scratch directory (initial model, teacher rows, SFT checkpoints).
        rows: the teacher's SFT rows.
        data_keys: ``data.*`` overrides saying how ``verl sft`` reads ``rows``.
    """
    from transformers import AutoModelForCausalLM

    from verl.commands.sft import train_sft

    init_dir, data = work / "init", work / "teacher.jsonl"
    init_model(spec, tok).save_pretrained(init_dir)
    tok.save_pretrained(init_dir)
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer, history = train_sft(sft_overrides(spec, init_dir, data, work, data_keys))
    model = AutoModelForCausalLM.from_pretrained(work / "ckpt" / f"global_step_{trainer.global_step}")
    return model.eval(), float(history[-1]["train/loss"])
