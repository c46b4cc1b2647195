"""SFT / DPO forwards score only the loss tokens, and packed (``use_remove_padding``) equals padded.

Reference values are the textbook ones: the model's full `(B, T, V)` logits, a float64
log-softmax, gathered at the target tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from verl.config.sft_loader import load_sft_config
from verl.modules.forward import compute_token_log_probs
from verl.trainer.supervised.streams import token_log_probs
from verl.trainer.supervised.builders import build_supervised_trainer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "sft"
BUILTIN_SFT = [
    "model.partial_pretrain=builtin://tiny-arithmetic",
    "data.train_files=builtin://arithmetic_sft/train",
    "data.val_files=[builtin://arithmetic_answers/test]",
    "data.prompt_key=prompt",
    "data.response_key=response",
    "data.max_length=32",
    "data.train_batch_size=16",
    "data.micro_batch_size_per_gpu=8",
    "optim.lr=1e-3",
]


def _model(lora: bool = False) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).float()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "lm_head"]))
    return model


def _rows(left: bool) -> dict[str, torch.Tensor]:
    """Rows of 3, 21, 9 and 30 real tokens (very different lengths), loss on a suffix of each (with a
    gap in the longer ones, as multi-turn rows have)."""
    g = torch.Generator().manual_seed(1)
    lengths, prompts, width = [3, 21, 9, 30], [1, 15, 2, 4], 30
    ids = torch.zeros(4, width, dtype=torch.long)
    mask, loss = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, (n, p) in enumerate(zip(lengths, prompts, strict=True)):
        cols = slice(width - n, width) if left else slice(0, n)
        ids[i, cols] = torch.randint(1, 97, (n,), generator=g)
        mask[i, cols] = 1
        start = (width - n if left else 0) + p
        loss[i, start : start + n - p] = 1
        if n - p > 6:  # multi-turn: two assistant spans with a user turn between them
            loss[i, start + 2 : start + 5] = 0
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "loss_mask": loss,
    }


def _reference(model: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]).logits
    logp = torch.log_softmax(logits.double(), -1)[:, :-1].gather(-1, b["input_ids"][:, 1:, None]).squeeze(-1)
    return (logp * b["loss_mask"][:, 1:]).float()


@pytest.mark.parametrize("lora", [False, True], ids=["fused-head", "peft-unfused"])
@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_token_log_probs_padded_and_packed_equal_full_log_softmax(lora: bool, left: bool) -> None:
    model, b = _model(lora), _rows(left)
    if lora:  # move the adapters off zero so they change the logits
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.2)
    expected = _reference(model, b)
    args = (model, b["input_ids"], b["attention_mask"], b["position_ids"], b["loss_mask"])
    grads = []
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        lp = token_log_probs(*args, remove_padding=packed)
        assert lp.shape == (4, 29) and lp.dtype == torch.float32
        torch.testing.assert_close(lp, expected, atol=1e-5, rtol=0)
        assert bool((lp[b["loss_mask"][:, 1:] == 0] == 0).all())  # 0 off the loss tokens
        (-lp.sum() / b["loss_mask"].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-6, rtol=1e-4, msg=name)


def test_token_log_probs_refuse_a_target_without_context() -> None:
    model, b = _model(), _rows(left=True)
    targets = b["attention_mask"].bool()  # the first real token of each row has nothing before it
    for packed in (False, True):
        with pytest.raises(ValueError, match="no real token before"):
            compute_token_log_probs(
                model, b["input_ids"], b["attention_mask"], b["position_ids"], targets, remove_padding=packed
            )


def _history(
    example: str | None, tmp_path: Path, name: str, algorithm: str | None, *extra: str
) -> list[dict[str, float]]:
    torch.set_num_threads(1)
    cfg = load_sft_config(
        EXAMPLES / example if example else None,
        [
            f"trainer.default_local_dir={tmp_path}/{name}/ckpt",
            f"trainer.output_dir={tmp_path}/{name}/out",
            "trainer.logger=[jsonl]",
            "trainer.total_training_steps=3",
            *extra,
        ],
        algorithm=algorithm,
    )
    return build_supervised_trainer(cfg).fit()


@pytest.mark.parametrize(
    "example, algorithm, extra",
    [
        (None, "sft", BUILTIN_SFT),
        ("dpo_builtin.yaml", "dpo", ["data.train_batch_size=16", "data.micro_batch_size_per_gpu=8"]),
        ("hybrid_builtin.yaml", None, []),
    ],
    ids=["sft", "dpo", "hybrid"],
)
def test_packed_run_equals_padded_run_over_3_steps(
    tmp_path: Path, example: str, algorithm: str | None, extra: list[str]
) -> None:
    padded = _history(example, tmp_path, "padded", algorithm, *extra, "use_remove_padding=false")
    packed = _history(example, tmp_path, "packed", algorithm, *extra, "use_remove_padding=true")
    assert [h["step"] for h in packed] == [1, 2, 3]
    keys = [k for k in padded[0] if not k.startswith("timing_s/")]
    assert any("loss" in k for k in keys) and "train/grad_norm" in keys
    for a, b in zip(padded, packed, strict=True):
        for k in keys:
            assert b[k] == pytest.approx(a[k], abs=1e-4, rel=1e-4), (k, a["step"])
    assert padded[0] != padded[-1]  # the runs train (step 3 differs from step 1)
