"""`verl init-model`: random models next to the real shared tokenizers load offline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from verl.modules.init_model import build_config, init_random_model, main

SHARED = Path(os.environ.get("VERL_SHARED_DIR", Path(__file__).resolve().parents[2].parent / "shared"))
QWEN_TOK = SHARED / "tokenizers" / "qwen2.5"
GPT2_TOK = SHARED / "tokenizers" / "gpt2"


def _need(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"shared tokenizer not found at {path}")
    return path


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_random_model("qwen2", "tiny", _need(QWEN_TOK), tmp_path_factory.mktemp("qwen"), seed=3)


def test_qwen2_tiny_loads_offline_with_tokenizer_ids(qwen_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(qwen_dir)
    tok = AutoTokenizer.from_pretrained(qwen_dir)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (64, 2, 4)
    assert (cfg.num_key_value_heads, cfg.intermediate_size, cfg.max_position_embeddings) == (2, 128, 4096)
    # 151,665 tokens rounded up to a multiple of 64.
    assert len(tok) == 151665 and cfg.vocab_size == 151680
    assert cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id) == (151645, 151643, None)
    # <|im_end|> first, then <|endoftext|>: generation stops on either.
    assert GenerationConfig.from_pretrained(qwen_dir).eos_token_id == [151645, 151643]
    assert tok("Hello world")["input_ids"] == [9707, 1879]
    assert tok.chat_template is not None
    out = model(torch.tensor([[9707, 1879]]))
    assert out.logits.shape == (1, 2, 151680)


def test_same_seed_same_weights_other_seed_differs(qwen_dir: Path, tmp_path: Path) -> None:
    ref = AutoModelForCausalLM.from_pretrained(qwen_dir).state_dict()
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    same = AutoModelForCausalLM.from_pretrained(init_random_model("qwen2", "tiny", QWEN_TOK, tmp_path / "a", seed=3))
    assert torch.rand(1) == before, "init_random_model must not touch the global RNG"
    other = AutoModelForCausalLM.from_pretrained(init_random_model("qwen2", "tiny", QWEN_TOK, tmp_path / "b", seed=4))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(same.state_dict()[key], ref[key])
    assert not torch.equal(other.state_dict()[key], ref[key])


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_cli_writes_gpt2_tokenizer_models(arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / arch
    assert main(["--arch", arch, "--size", "tiny", "--tokenizer", str(_need(GPT2_TOK)), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == 50304  # 50,257 -> next multiple of 64
    # GPT-2 has no pad token: pad falls back to eos (<|endoftext|> = 50256).
    assert (model.config.eos_token_id, model.config.pad_token_id) == (50256, 50256)
    assert GenerationConfig.from_pretrained(out).eos_token_id == 50256
    assert tok("Hello world")["input_ids"] == [15496, 995]
    if arch == "gpt2":  # learned absolute positions, no dropout
        assert model.transformer.wpe.weight.shape == (4096, 64)
        assert model.config.resid_pdrop == model.config.attn_pdrop == model.config.embd_pdrop == 0.0


def test_small_size_and_bad_arch() -> None:
    tok = AutoTokenizer.from_pretrained(_need(GPT2_TOK))
    cfg = build_config("qwen2", "small", tok)
    assert (cfg.hidden_size, cfg.num_hidden_layers) == (256, 4)
    with pytest.raises(ValueError, match="valid: qwen2, llama, gpt2"):
        build_config("mamba", "tiny", tok)
    with pytest.raises(ValueError, match="valid: tiny, small"):
        build_config("qwen2", "huge", tok)
