"""`create_model` for every role, LoRA reference policy, `ValueModel` save/load, `load_tokenizer`."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl.config.schema import CriticModelConfig, ModelConfig, RewardModelModelConfig
from verl.modules import ValueModel, create_model, load_tokenizer, ref_policy_context
from verl.modules.forward import compute_rm_scores

SHARED = Path(os.environ.get("VERL_SHARED_DIR", Path(__file__).resolve().parents[2].parent / "shared"))


def _tiny_dir(root: Path, arch: str = "qwen2", seed: int = 0) -> Path:
    """Save a randomly initialised tiny model (vocab 128) and return its directory."""
    if arch == "gpt2":
        cfg = AutoConfig.for_model(
            "gpt2", vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64, eos_token_id=2, pad_token_id=0
        )
    else:
        cfg = AutoConfig.for_model(
            arch,
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
    torch.manual_seed(seed)
    out = root / f"{arch}-{seed}"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_dir(tmp_path_factory.mktemp("models"), "gpt2")


def test_unknown_role_lists_roles(qwen_dir: Path) -> None:
    with pytest.raises(ValueError, match="valid roles: actor, ref, critic, reward_model"):
        create_model("policy", ModelConfig(path=str(qwen_dir)))


def test_actor_trainable_ref_frozen_dtype_override(qwen_dir: Path) -> None:
    actor = create_model("actor", ModelConfig(path=str(qwen_dir)))
    assert all(p.requires_grad for p in actor.parameters()) and actor.dtype == torch.float32
    ref = create_model("ref", ModelConfig(path=str(qwen_dir), lora_rank=8), dtype="bfloat16")
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert ref.dtype == torch.bfloat16 and type(ref).__name__ == "Qwen2ForCausalLM"  # ref never gets LoRA
    with pytest.raises(ValueError, match="no model path"):
        create_model("critic", CriticModelConfig())


def test_builtin_path_resolves_through_builtin_module(qwen_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("verl.modules.builtin")
    fake.get_builtin_model_dir = lambda name: qwen_dir if name == "tiny-arithmetic" else None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl.modules.builtin", fake)
    model = create_model("actor", ModelConfig(path="builtin://tiny-arithmetic"))
    assert model.config.hidden_size == 32


def test_gradient_checkpointing_and_dropout_off(gpt2_dir: Path) -> None:
    model = create_model("actor", ModelConfig(path=str(gpt2_dir), enable_gradient_checkpointing=True))
    assert model.is_activation_checkpointing
    # GPT-2 defaults to dropout 0.1: the factory switches it off, so train mode is deterministic.
    model.train()
    ids = torch.tensor([[5, 6, 7, 8]])
    a, b = model(ids).logits, model(ids).logits
    assert torch.equal(a, b)
    a.sum().backward()
    assert model.transformer.h[0].attn.c_attn.weight.grad is not None


def test_lora_actor_and_reference_policy_context(qwen_dir: Path) -> None:
    cfg = ModelConfig(path=str(qwen_dir), lora_rank=4, lora_alpha=8, target_modules="q_proj, v_proj")
    actor = create_model("actor", cfg)
    trainable = {n for n, p in actor.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".lora_")[0].split(".")[-1] for n in trainable} == {"q_proj", "v_proj"}
    base = AutoModelForCausalLM.from_pretrained(qwen_dir)
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        for name, p in actor.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)  # adapters now change the output
        expected = base(ids).logits
        assert (actor(ids).logits - expected).abs().max() > 1e-3
        with ref_policy_context(actor) as ref:
            torch.testing.assert_close(ref(ids).logits, expected, atol=1e-5, rtol=0)
        assert (actor(ids).logits - expected).abs().max() > 1e-3  # adapters back on
    with pytest.raises(TypeError, match="create_model\\('ref'"):
        with ref_policy_context(base):
            pass


def test_critic_value_model_zero_head_save_load(qwen_dir: Path, tmp_path: Path) -> None:
    critic = create_model("critic", CriticModelConfig(), path=str(qwen_dir))
    assert isinstance(critic, ValueModel)
    ids = torch.tensor([[0, 3, 4, 5], [6, 7, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    pos = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]])
    values = critic(ids, mask, pos)
    assert values.shape == (2, 4) and torch.equal(values, torch.zeros(2, 4))
    with torch.no_grad():
        critic.value_head.weight.normal_()
        critic.value_head.bias.fill_(0.25)
    expected = critic(ids, mask, pos)
    critic.save_pretrained(tmp_path / "critic")
    loaded = create_model("critic", CriticModelConfig(path=str(tmp_path / "critic")))
    torch.testing.assert_close(loaded(ids, mask, pos), expected, atol=1e-6, rtol=0)
    lora = create_model("critic", CriticModelConfig(path=str(qwen_dir), lora_rank=2))
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert "value_head.weight" in trainable and any("lora_" in n for n in trainable)


def test_reward_model_score_read_by_position_not_value_b17(qwen_dir: Path) -> None:
    """B17: pad == eos = 2; the response ends with a real EOS followed by two pads."""
    rm = create_model("reward_model", RewardModelModelConfig(path=str(qwen_dir)))
    assert rm.config.num_labels == 1 and not rm.training
    with torch.no_grad():
        rm.score.weight.normal_(generator=torch.Generator().manual_seed(0))
    rm.config.pad_token_id = 2
    ids = torch.tensor([[9, 1, 2, 9, 5, 6, 2, 2, 2]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 6, 6]])
    with torch.no_grad():
        scores = compute_rm_scores(rm, ids, mask, pos)
        alone = compute_rm_scores(rm, ids[:, :7], mask[:, :7], pos[:, :7])
        by_value = rm(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, 0]  # HF: last id != pad
    torch.testing.assert_close(scores, alone, atol=1e-5, rtol=0)
    assert (scores - by_value).abs().max() > 1e-4  # the by-value pooling reads token 5, not the EOS


def test_load_tokenizer_sets_pad_to_eos_left_padding_b17() -> None:
    """B17: GPT-2 has no pad token; pad = eos must not mask an eos id inside the prompt."""
    path = SHARED / "tokenizers" / "gpt2"
    if not path.is_dir():
        pytest.skip(f"shared tokenizer not found at {path}")
    tok = load_tokenizer(path)
    assert tok.pad_token_id == tok.eos_token_id == 50256 and tok.padding_side == "left"
    batch = tok(["a<|endoftext|>b", "Hello world again and again"], padding=True)
    ids, mask = batch["input_ids"][0], batch["attention_mask"][0]
    n_pad = len(ids) - 3
    assert ids[n_pad:] == [64, 50256, 65]
    assert mask == [0] * n_pad + [1, 1, 1]
