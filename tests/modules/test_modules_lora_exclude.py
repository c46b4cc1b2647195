"""``model.exclude_modules`` reaches peft: the matching modules get no LoRA adapter."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl.config.schema import CriticModelConfig, ModelConfig
from verl.modules import create_model


def _tiny_qwen(root: Path) -> Path:
    cfg = AutoConfig.for_model(
        "qwen2",
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(root)
    return root


def _adapted(model: torch.nn.Module) -> set[str]:
    """Dotted names (from ``layers.``) of the modules holding a LoRA adapter."""
    names = {n.split(".lora_A")[0] for n, _ in model.named_parameters() if ".lora_A" in n}
    return {n[n.index("layers.") :] for n in names}


def test_excluded_modules_get_no_adapter(tmp_path: Path) -> None:
    path = str(_tiny_qwen(tmp_path / "qwen"))
    everything = _adapted(create_model("actor", ModelConfig(path=path, lora_rank=4, target_modules="q_proj,v_proj")))
    assert everything == {f"layers.{i}.self_attn.{m}" for i in (0, 1) for m in ("q_proj", "v_proj")}
    cfg = ModelConfig(path=path, lora_rank=4, target_modules="q_proj,v_proj", exclude_modules=r".*layers\.0\..*")
    assert _adapted(create_model("actor", cfg)) == {"layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"}
    critic = create_model(
        "critic", CriticModelConfig(path=path, lora_rank=4, target_modules="q_proj,v_proj", exclude_modules=r".*v_proj")
    )
    assert _adapted(critic) == {"layers.0.self_attn.q_proj", "layers.1.self_attn.q_proj"}
