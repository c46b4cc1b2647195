"""Shared training forwards: explicit positions under left padding (B12), log-probs, values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl.config.schema import CriticModelConfig, ModelConfig
from verl.modules import create_model
from verl.modules.forward import (
    compute_log_probs,
    compute_log_probs_and_entropy,
    compute_values,
    position_ids_from_attention_mask,
)

PADDED = torch.tensor([[0, 0, 11, 12, 21, 22]])
PADDED_MASK = torch.tensor([[0, 0, 1, 1, 1, 1]])
UNPADDED = torch.tensor([[11, 12, 21, 22]])


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny GPT-2: learned absolute position embeddings, so wrong positions change the output."""
    cfg = AutoConfig.for_model(
        "gpt2", vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32, eos_token_id=2, pad_token_id=0
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.transformer.wpe.weight.normal_(std=1.0)  # make positions matter a lot
    out = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(out)
    return out


def test_position_ids_from_left_padded_mask_b12() -> None:
    assert position_ids_from_attention_mask(PADDED_MASK).tolist() == [[0, 0, 0, 1, 2, 3]]
    assert position_ids_from_attention_mask(torch.tensor([[1, 1, 1, 0]])).tolist() == [[0, 1, 2, 2]]


@pytest.mark.parametrize("role", ["actor", "ref"])
def test_left_padded_log_probs_equal_unpadded_b12(gpt2_dir: Path, role: str) -> None:
    """B12: [PAD, PAD, 11, 12] + [21, 22] scores like [11, 12] + [21, 22] at positions 0..3."""
    model = create_model(role, ModelConfig(path=str(gpt2_dir)))
    pos = position_ids_from_attention_mask(PADDED_MASK)
    with torch.no_grad():
        padded = compute_log_probs(model, PADDED, PADDED_MASK, pos, response_length=2)
        unpadded = compute_log_probs(model, UNPADDED, torch.ones_like(UNPADDED), torch.arange(4)[None], 2)
        default_positions = compute_log_probs(model, PADDED, PADDED_MASK, torch.arange(6)[None], 2)
    assert padded.shape == (1, 2)
    torch.testing.assert_close(padded, unpadded, atol=1e-5, rtol=0)
    assert (default_positions - unpadded).abs().max() > 1e-3  # the B12 bug: arange positions


def test_critic_values_left_padded_equal_unpadded_b12(gpt2_dir: Path) -> None:
    critic = create_model("critic", CriticModelConfig(path=str(gpt2_dir)))
    with torch.no_grad():
        critic.value_head.weight.normal_(generator=torch.Generator().manual_seed(1))
        padded = compute_values(critic, PADDED, PADDED_MASK, position_ids_from_attention_mask(PADDED_MASK), 2)
        unpadded = compute_values(critic, UNPADDED, torch.ones_like(UNPADDED), torch.arange(4)[None], 2)
        full = critic(UNPADDED, torch.ones_like(UNPADDED), torch.arange(4)[None])
    torch.testing.assert_close(padded, unpadded, atol=1e-5, rtol=0)
    # values[:, j] is V of the state before response token j: positions P-1 and P of the full output.
    torch.testing.assert_close(unpadded, full[:, 1:3], atol=0, rtol=0)


def test_log_probs_and_entropy_match_naive_temperature(gpt2_dir: Path) -> None:
    model = create_model("actor", ModelConfig(path=str(gpt2_dir)))
    ids = torch.tensor([[0, 5, 6, 7, 8, 9], [4, 5, 6, 7, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    pos = position_ids_from_attention_mask(mask)
    with torch.no_grad():
        logp, ent = compute_log_probs_and_entropy(model, ids, mask, pos, response_length=3, temperature=0.7)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, 2:5] / 0.7
    naive = torch.log_softmax(logits, -1)
    torch.testing.assert_close(logp, naive.gather(-1, ids[:, 3:, None]).squeeze(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, -(naive.exp() * naive).sum(-1), atol=1e-5, rtol=0)
    assert torch.equal(logp, compute_log_probs(model, ids, mask, pos, 3, 0.7))


def test_packed_forward_without_mask_logits_to_keep_support_gives_the_same_log_probs(monkeypatch, tiny_model_dir):
    """transformers < 5.20 cannot take a boolean ``logits_to_keep``: the fallback (full logits,
    then the scored rows) must give the packed path's values exactly."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl.modules import forward as fwd

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 60, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    mask[2, :2] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        fast, _ = fwd.compute_log_probs_and_entropy(
            model, ids, mask, pos, 4, compute_entropy=False, remove_padding=True
        )
        monkeypatch.setattr(fwd, "_logits_to_keep_takes_masks", lambda: False)
        slow, _ = fwd.compute_log_probs_and_entropy(
            model, ids, mask, pos, 4, compute_entropy=False, remove_padding=True
        )
    assert torch.allclose(fast, slow, atol=1e-6)
