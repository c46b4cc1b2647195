"""The ``hf`` rollout engine on tiny random models: parity with HF generate, consistency of the
reported log-probs with the training forward, seeding, stopping and masks (B12, B15, B17)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import tiny_causal_lm
from torch import nn
from transformers import AutoConfig

from verl.algorithms.masked import compute_response_mask_from_lengths
from verl.config.schema import RolloutConfig
from verl.modules.forward import compute_log_probs, position_ids_from_attention_mask
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout

VOCAB = 128


def _tiny_lm(arch: str = "qwen2", seed: int = 0) -> nn.Module:
    return tiny_causal_lm(arch, seed, VOCAB)


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return _tiny_lm()


def _prompts(rows: list[list[int]], pad: int = 0, **meta: object) -> DataProto:
    """Left-pad ``rows`` into a prompt batch with uids."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(len(rows))], dtype=object)},
        meta_info=dict(meta),
    )


PROMPTS = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33]]


def _engine(model: nn.Module, eos: list[int] | None = None, pad: int = 0, **cfg: object) -> HFRollout:
    cfg.setdefault("response_length", 6)
    return HFRollout(model, RolloutConfig(**cfg), eos_token_id=eos or [VOCAB - 1], pad_token_id=pad)


def test_greedy_equals_hf_generate_with_eos_stop(model: nn.Module) -> None:
    batch = _prompts(PROMPTS)
    free = _engine(model, do_sample=False).generate_sequences(batch).batch["responses"]
    eos = int(free[1, 2])  # row 1 stops after 3 tokens once this id is an eos
    assert eos not in free[1, :2].tolist()
    out = _engine(model, eos=[VOCAB - 1, eos], do_sample=False).generate_sequences(batch)
    ref = model.generate(
        input_ids=batch.batch["input_ids"],
        attention_mask=batch.batch["attention_mask"],
        do_sample=False,
        max_new_tokens=6,
        eos_token_id=[VOCAB - 1, eos],
        pad_token_id=0,
    )
    ref_resp = torch.nn.functional.pad(ref[:, 5:], (0, 6 - (ref.shape[1] - 5)), value=0)
    assert torch.equal(out.batch["responses"], ref_resp)
    assert out.batch["response_mask"][1].tolist() == [1, 1, 1, 0, 0, 0]


def test_output_layout_and_training_mode_restored(model: nn.Module) -> None:
    batch = _prompts(PROMPTS)
    model.train()
    out = _engine(model, temperature=0.9, seed=0).generate_sequences(batch)
    assert model.training
    model.eval()
    b = out.batch
    assert b["responses"].shape == (3, 6) and b["input_ids"].shape == (3, 11)
    assert torch.equal(b["prompts"], batch.batch["input_ids"])
    assert torch.equal(b["input_ids"], torch.cat([b["prompts"], b["responses"]], 1))
    assert torch.equal(b["attention_mask"], torch.cat([batch.batch["attention_mask"], b["response_mask"]], 1))
    # positions continue from the last prompt position: row 0 has prompt positions [0,0,0,0,1]
    assert b["position_ids"][0].tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]
    assert list(out.non_tensor_batch["uid"]) == ["u0", "u1", "u2"]
    assert out.meta_info["temperature"] == 0.9 and b["rollout_log_probs"].dtype == torch.float32


@pytest.mark.parametrize(
    "sampling",
    [
        {"do_sample": False},
        {"temperature": 0.8, "top_k": 20, "top_p": 0.9},
        {"temperature": 1.3},
    ],
)
def test_rollout_log_probs_match_training_forward(model: nn.Module, sampling: dict) -> None:
    """Same weights: the full-sequence training forward reproduces rollout_log_probs (fp32, 1e-4)."""
    out = _engine(model, seed=5, response_length=8, **sampling).generate_sequences(_prompts(PROMPTS))
    b = out.batch
    with torch.no_grad():
        logp = compute_log_probs(
            model, b["input_ids"], b["attention_mask"], b["position_ids"], 8, temperature=out.meta_info["temperature"]
        )
    mask = b["response_mask"].bool()
    assert mask.sum() > 0
    assert (logp - b["rollout_log_probs"])[mask].abs().max() <= 1e-4
    assert torch.all(b["rollout_log_probs"][~mask] == 0)


def test_seeded_sampling_reproducible_and_rng_state(model: nn.Module) -> None:
    batch = _prompts(PROMPTS * 2)
    first = _engine(model, response_length=8).generate_sequences(_prompts(PROMPTS * 2, seed=7)).batch["responses"]
    again = _engine(model, response_length=8).generate_sequences(_prompts(PROMPTS * 2, seed=7)).batch["responses"]
    other = _engine(model, response_length=8).generate_sequences(_prompts(PROMPTS * 2, seed=8)).batch["responses"]
    assert torch.equal(first, again) and not torch.equal(first, other)
    engine = _engine(model, response_length=8, seed=3)
    state = engine.rng_state()
    step1 = engine.generate_sequences(batch).batch["responses"]
    step2 = engine.generate_sequences(batch).batch["responses"]
    assert not torch.equal(step1, step2)  # the engine's generator advances between calls
    engine.set_rng_state(state)
    assert torch.equal(engine.generate_sequences(batch).batch["responses"], step1)
    assert torch.equal(_engine(model, response_length=8, seed=3).generate_sequences(batch).batch["responses"], step1)


def test_top_k_1_equals_greedy_and_validate_uses_val_kwargs(model: nn.Module) -> None:
    greedy = _engine(model, do_sample=False).generate_sequences(_prompts(PROMPTS)).batch["responses"]
    top1 = _engine(model, temperature=1.0, top_k=1, seed=1).generate_sequences(_prompts(PROMPTS))
    assert torch.equal(top1.batch["responses"], greedy)
    val = _engine(model, temperature=1.0, seed=1).generate_sequences(_prompts(PROMPTS, validate=True))
    assert torch.equal(val.batch["responses"], greedy) and val.meta_info["temperature"] == 1.0


def test_micro_batches_and_cache_kinds_agree(model: nn.Module) -> None:
    batch = _prompts(PROMPTS)
    full = _engine(model, do_sample=False).generate_sequences(batch).batch
    one_by_one = _engine(model, do_sample=False, max_num_seqs=1).generate_sequences(batch).batch
    dynamic = (
        _engine(model, do_sample=False, engine_kwargs={"cache_implementation": "dynamic"})
        .generate_sequences(batch)
        .batch
    )
    for other in (one_by_one, dynamic):
        assert torch.equal(other["responses"], full["responses"])
        torch.testing.assert_close(other["rollout_log_probs"], full["rollout_log_probs"], atol=1e-5, rtol=0)


def test_bf16_rollout_dtype_runs_under_autocast(model: nn.Module) -> None:
    out = _engine(model, do_sample=False, dtype="bfloat16").generate_sequences(_prompts(PROMPTS))
    fp32 = _engine(model, do_sample=False).generate_sequences(_prompts(PROMPTS))
    assert next(model.parameters()).dtype == torch.float32  # weights untouched
    # bf16 matmuls move the log-probs by more than fp32 rounding, but not by much.
    diff = (out.batch["rollout_log_probs"] - fp32.batch["rollout_log_probs"]).abs()[:, 0]
    assert 0 < diff.max() < 0.1


def test_update_weights_from_state_dict(model: nn.Module) -> None:
    other = _tiny_lm(seed=1)
    engine = _engine(_tiny_lm(seed=0), do_sample=False)
    engine.update_weights(other.state_dict())
    expected = _engine(other, do_sample=False).generate_sequences(_prompts(PROMPTS)).batch["responses"]
    assert torch.equal(engine.generate_sequences(_prompts(PROMPTS)).batch["responses"], expected)
    engine.update_weights(model)
    assert engine.module is model


def test_gpt2_left_padding_generates_like_unpadded_b12() -> None:
    """B12 with learned absolute positions: [PAD, PAD, 11, 12] generates like [11, 12]."""
    gpt2 = _tiny_lm("gpt2")
    with torch.no_grad():
        gpt2.transformer.wpe.weight.normal_(std=1.0)
    padded = _engine(gpt2, do_sample=False).generate_sequences(_prompts([[11, 12], [5, 6, 7, 8]]))
    alone = _engine(gpt2, do_sample=False).generate_sequences(_prompts([[11, 12]]))
    assert torch.equal(padded.batch["responses"][0], alone.batch["responses"][0])
    torch.testing.assert_close(
        padded.batch["rollout_log_probs"][0], alone.batch["rollout_log_probs"][0], atol=1e-5, rtol=0
    )


class ScriptedLM(nn.Module):
    """Emits ``script[:, k]`` at generation step k (one-hot logits of height 10), whatever the input."""

    def __init__(self, script: list[list[int]], vocab: int = 16) -> None:
        super().__init__()
        self.config = AutoConfig.for_model(
            "qwen2", vocab_size=vocab, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1
        )
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the engine a device
        self.script, self.vocab, self.calls = torch.tensor(script), vocab, 0

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> object:
        logits = 10.0 * nn.functional.one_hot(self.script[:, self.calls], self.vocab).float()
        self.calls += 1
        return type("Out", (), {"logits": logits[:, None, :]})()


LOGP_10 = 10.0 - float(np.log(np.exp(10.0) + 15))  # log-prob of a one-hot-10 token over V = 16


def test_mask_from_lengths_b15() -> None:
    """B15: R1 stops on EOS (2), R3 hits max_tokens; padding (0) never enters the mask."""
    lm = ScriptedLM([[5, 6, 2, 7, 7], [4, 4, 4, 4, 4]])
    out = HFRollout(lm, RolloutConfig(response_length=5, do_sample=False), eos_token_id=2, pad_token_id=0)
    b = out.generate_sequences(_prompts([[1, 9], [3]])).batch
    assert b["responses"].tolist() == [[5, 6, 2, 0, 0], [4, 4, 4, 4, 4]]
    assert b["response_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    torch.testing.assert_close(b["rollout_log_probs"][0], torch.tensor([LOGP_10] * 3 + [0.0, 0.0]))
    # R2 stopped on a stop string after 3 tokens: the engine reports length 3, the mask follows.
    lengths = torch.tensor([3, 3, 5])
    assert compute_response_mask_from_lengths(lengths, 5, dtype=torch.long).tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
    ]


def test_pad_equals_eos_keeps_real_eos_and_prompt_b17() -> None:
    """B17: pad == eos == 2; response [5, 6, 2, 2, 2] -> mask [1, 1, 1, 0, 0]; prompt [1, 2, 9] kept."""
    lm = ScriptedLM([[5, 6, 2, 9, 9]])
    engine = HFRollout(lm, RolloutConfig(response_length=5, do_sample=False), eos_token_id=2, pad_token_id=2)
    b = engine.generate_sequences(_prompts([[1, 2, 9]], pad=2)).batch
    assert b["responses"].tolist() == [[5, 6, 2, 2, 2]]
    assert b["response_mask"].tolist() == [[1, 1, 1, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 0, 0]]
    assert lm.calls == 3  # the loop stops once every row has finished


def test_stops_on_any_of_several_eos_ids_from_meta() -> None:
    lm = ScriptedLM([[5, 3, 7, 7], [2, 7, 7, 7], [7, 7, 7, 7]])
    engine = HFRollout(lm, RolloutConfig(response_length=4, do_sample=False), eos_token_id=15, pad_token_id=0)
    b = engine.generate_sequences(_prompts([[1], [1], [1]], eos_token_id=[2, 3])).batch
    assert b["responses"].tolist() == [[5, 3, 0, 0], [2, 0, 0, 0], [7, 7, 7, 7]]
    assert b["response_mask"].sum(1).tolist() == [2, 1, 4]
    lm.calls = 0
    ignore = HFRollout(lm, RolloutConfig(response_length=4, do_sample=False, ignore_eos=True), eos_token_id=[2, 3])
    assert ignore.generate_sequences(_prompts([[1], [1], [1]])).batch["response_mask"].sum(1).tolist() == [4, 4, 4]


def test_bad_inputs_raise_clear_errors(model: nn.Module) -> None:
    right_padded = _prompts([[1, 2], [3]])
    right_padded.batch["attention_mask"] = torch.tensor([[1, 1], [1, 0]])
    with pytest.raises(ValueError, match="left-padded"):
        _engine(model).generate_sequences(right_padded)
    with pytest.raises(ValueError, match="response_length"):
        HFRollout(model, RolloutConfig(), eos_token_id=2).generate_sequences(_prompts([[1]]))
    with pytest.raises(ValueError, match="prompt of 3 tokens > rollout.prompt_length 2"):  # B26
        _engine(model, prompt_length=2).generate_sequences(_prompts([[1, 2, 3], [4]]))
    with pytest.raises(ValueError, match="prompt 3 \\+ response 6 tokens > rollout.max_model_len 8"):
        _engine(model, max_model_len=8).generate_sequences(_prompts([[1, 2, 3], [4]]))
    with pytest.raises(ValueError, match="static\\|dynamic"):
        _engine(model, engine_kwargs={"cache_implementation": "paged"})


def test_cache_keyword_follows_the_models_forward_signature():
    """transformers renamed ``past_key_values`` to ``cache``; a wrong name is swallowed by
    ``**kwargs`` and decoding loses its context, so the engine asks the forward which it takes."""
    import pytest
    import torch

    from verl.workers.rollout.hf.hf_rollout import cache_keyword

    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None, **kwargs):  # noqa: D401
            return input_ids

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, **kwargs):
            return input_ids

    class Neither(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    assert cache_keyword(New()) == "cache"
    assert cache_keyword(Old()) == "past_key_values"
    with pytest.raises(TypeError, match="KV cache"):
        cache_keyword(Neither())
