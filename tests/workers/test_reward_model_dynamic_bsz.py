"""`RewardModelWorker.compute_rm_score` packs micro-batches by token budget under
``reward_model.use_dynamic_bsz`` (``forward_max_token_len_per_gpu`` tokens each), with the same scores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl.config.schema import RewardModelConfig, RewardModelModelConfig
from verl.protocol import DataProto
from verl.workers.fsdp_workers import RewardModelWorker

P, R = 4, 4  # prompt and response slots


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = AutoConfig.for_model(
        "qwen2",
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=32,
        tie_word_embeddings=False,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("rm") / "qwen2"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    return out


def _batch() -> DataProto:
    """4 rows of T = 8 slots whose real lengths are 3, 5, 7 and 8 tokens (prompts left-padded)."""
    g = torch.Generator().manual_seed(1)
    prompt_len, response_len = torch.tensor([1, 2, 3, 4]), torch.tensor([2, 3, 4, 4])
    ids = torch.randint(3, 64, (4, P + R), generator=g)
    slot = torch.arange(P + R)
    attn = ((slot >= P - prompt_len[:, None]) & (slot < P + response_len[:, None])).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids * attn,
            "attention_mask": attn,
            "position_ids": pos,
            "responses": (ids * attn)[:, P:],
            "response_mask": attn[:, P:],
        }
    )


def _score(rm_dir: Path, **section: object) -> tuple[torch.Tensor, list[int]]:
    """``rm_scores`` and the real-token count of each reward-model forward."""
    worker = RewardModelWorker(
        RewardModelConfig(enable=True, model=RewardModelModelConfig(path=str(rm_dir)), **section)
    )
    worker.init_model()
    with torch.no_grad():
        worker.engine.module.score.weight.normal_(generator=torch.Generator().manual_seed(0))
    tokens: list[int] = []
    hook = worker.engine.module.register_forward_pre_hook(
        lambda _m, _a, kw: tokens.append(int(kw["attention_mask"].sum())), with_kwargs=True
    )
    try:
        scores = worker.compute_rm_score(_batch()).batch["rm_scores"]
    finally:
        hook.remove()
    return scores, tokens


def test_dynamic_bsz_packs_by_the_token_budget_with_the_same_scores(rm_dir: Path) -> None:
    fixed, fixed_tokens = _score(rm_dir, micro_batch_size_per_gpu=4)
    assert fixed_tokens == [23]  # one forward of all 3 + 5 + 7 + 8 tokens
    packed, packed_tokens = _score(
        rm_dir, micro_batch_size_per_gpu=4, use_dynamic_bsz=True, forward_max_token_len_per_gpu=12
    )
    assert len(packed_tokens) >= 2 and max(packed_tokens) <= 12 and sum(packed_tokens) == 23
    _, wide_tokens = _score(rm_dir, micro_batch_size_per_gpu=4, use_dynamic_bsz=True, forward_max_token_len_per_gpu=64)
    assert wide_tokens == [23]  # the budget, not the flag alone, sets the split
    torch.testing.assert_close(packed, fixed, atol=1e-5, rtol=0)
    assert fixed.abs().sum() > 0
