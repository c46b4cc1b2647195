"""Stop strings (``rollout.stop``, ``rollout.include_stop_str_in_output``) on hand-built cases."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoConfig

from verl.config import ConfigError, load_config
from verl.config.schema import RolloutConfig
from verl.modules.forward import position_ids_from_attention_mask
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.stop_strings import StopStrings

EOS, PAD = 2, 0
TEXT = {3: "x", 4: "Ans", 5: "wer", 6: ":", 7: " 4", 8: "2", 9: "\n", 11: "#", 12: "END", 13: "2#", EOS: "<eos>"}


class CharTokenizer:
    """A hand-written vocabulary: id -> text piece; EOS is special (skipped when decoding)."""

    eos_token_id, pad_token_id = EOS, PAD

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(TEXT[i] for i in ids if not (skip_special_tokens and i in (EOS, PAD)))


class ScriptedLM(nn.Module):
    """Emits ``script[:, k]`` at generation step k (one-hot logits), whatever the input."""

    def __init__(self, script: list[list[int]], vocab: int = 16) -> None:
        super().__init__()
        self.config = AutoConfig.for_model(
            "qwen2", vocab_size=vocab, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1
        )
        self.anchor = nn.Parameter(torch.zeros(()))
        self.script, self.vocab, self.calls = torch.tensor(script), vocab, 0

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> object:
        logits = 10.0 * nn.functional.one_hot(self.script[:, self.calls], self.vocab).float()
        self.calls += 1
        return type("Out", (), {"logits": logits[:, None, :]})()


def _prompts(n: int) -> DataProto:
    ids, mask = torch.ones(n, 2, dtype=torch.long), torch.ones(n, 2, dtype=torch.long)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(n)], dtype=object)},
    )


SCRIPT = [
    [4, 5, 6, 7, 8, 11, 11, 9],  # "Answer: 42##\n": "##" completed by token 7; text before it ends at token 5
    [7, 13, 11, 9, 3, 3, 3, 3],  # " 4" "2#" "#": "##" starts inside token 2, which straddles it
    [4, 4, 4, 4, 4, 4, 4, 4],  # no stop string: runs to the limit
    [12, 3, 3, 3, 3, 3, 3, 3],  # "END" is the first token
    [4, EOS, 11, 11, 3, 3, 3, 3],  # EOS comes first
]


def _run(include: bool) -> tuple[torch.Tensor, ScriptedLM]:
    lm = ScriptedLM(SCRIPT)
    cfg = RolloutConfig(response_length=8, do_sample=False, stop=["##", "END"], include_stop_str_in_output=include)
    out = HFRollout(lm, cfg, CharTokenizer(), eos_token_id=EOS, pad_token_id=PAD).generate_sequences(_prompts(5))
    return out.batch, lm


def test_hf_keeps_the_stop_text_by_hand():
    b, _ = _run(include=True)
    assert b["response_mask"].sum(1).tolist() == [7, 3, 8, 1, 2]
    assert b["responses"].tolist()[:2] == [[4, 5, 6, 7, 8, 11, 11, PAD], [7, 13, 11, PAD, PAD, PAD, PAD, PAD]]
    assert b["responses"][3].tolist() == [12] + [PAD] * 7
    assert b["responses"][4].tolist() == [4, EOS] + [PAD] * 6
    assert bool((b["rollout_log_probs"][b["response_mask"] == 0] == 0).all())


def test_hf_removes_the_stop_text_by_hand():
    b, lm = _run(include=False)
    # row 1: " 4" (2 chars) ends before "##" at char 3; " 42#" (4 chars) does not: the straddling token goes
    assert b["response_mask"].sum(1).tolist() == [5, 1, 8, 0, 2]
    assert b["responses"][0].tolist() == [4, 5, 6, 7, 8] + [PAD] * 3
    assert b["responses"][1].tolist() == [7] + [PAD] * 7
    assert b["responses"][3].tolist() == [PAD] * 8  # an empty response: nothing left in the mask
    assert CharTokenizer().decode(b["responses"][0].tolist(), skip_special_tokens=True) == "Answer: 42"
    assert lm.calls == 8  # row 2 runs to the limit; the others stopped early


def test_every_row_stopped_ends_the_loop():
    lm = ScriptedLM([[11, 11, 3, 3, 3, 3], [12, 3, 3, 3, 3, 3]])
    cfg = RolloutConfig(response_length=6, do_sample=False, stop=["##", "END"])
    HFRollout(lm, cfg, CharTokenizer(), eos_token_id=EOS, pad_token_id=PAD).generate_sequences(_prompts(2))
    assert lm.calls == 2  # prefill + one decode step: both rows stopped by step 2


def test_cut_rules_and_bad_settings():
    tok = CharTokenizer()
    dec = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    # the first string completed wins: "END" is complete after token 1, "x##" only after token 3
    assert StopStrings(["x##", "END"], True, dec).cut([12, 3, 11, 11]) == 1
    assert StopStrings(["##"], True, dec).cut([4, 5, 6]) is None
    with pytest.raises(ValueError, match="non-empty strings"):
        StopStrings([""], True, dec)
    with pytest.raises(ValueError, match="needs the actor's tokenizer"):
        HFRollout(ScriptedLM([[3]]), RolloutConfig(response_length=1, stop=["#"]), eos_token_id=EOS, pad_token_id=PAD)
    with pytest.raises(ConfigError, match=r"`actor_rollout_ref.rollout.stop` is not supported yet"):
        load_config(None, ['actor_rollout_ref.rollout.stop=["#"]', "actor_rollout_ref.rollout.mode=async"])
    with pytest.raises(ConfigError, match="non-empty strings"):
        load_config(None, ['actor_rollout_ref.rollout.stop=[""]'])


def test_vllm_sampling_params_mapping(monkeypatch):
    from verl.workers.rollout.sampling import SamplingParams
    from verl.workers.rollout.vllm.vllm_config import vllm_sampling_params

    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kw: kw  # records the keyword arguments
    monkeypatch.setitem(sys.modules, "vllm", fake)
    greedy = SamplingParams(do_sample=False)
    plain = vllm_sampling_params(greedy, 8, [EOS], 0, False, True)
    assert "stop" not in plain and plain["detokenize"] is False
    with_stop = vllm_sampling_params(greedy, 8, [EOS], 0, False, True, ["##", "END"], True)
    assert with_stop["stop"] == ["##", "END"] and with_stop["include_stop_str_in_output"] is True
    assert with_stop["detokenize"] is True and with_stop["stop_token_ids"] == [EOS]


def test_vllm_outputs_are_cut_like_the_hf_engine():
    from verl.workers.rollout.vllm.vllm_rollout import _collect

    def output(ids: list[int]) -> object:
        completion = types.SimpleNamespace(
            token_ids=ids, logprobs=[{t: types.SimpleNamespace(logprob=-0.5)} for t in ids]
        )
        return types.SimpleNamespace(outputs=[completion])

    tok = CharTokenizer()
    stop = StopStrings(["##", "END"], False, lambda ids: tok.decode(ids, skip_special_tokens=True))
    responses, lengths, log_probs = _collect([output([4, 5, 6, 7, 8, 11, 11]), output([4, 4])], 8, PAD, stop)
    assert lengths.tolist() == [5, 2]
    assert responses[0].tolist() == [4, 5, 6, 7, 8, PAD, PAD, PAD]
    assert log_probs[0].tolist() == [-0.5] * 5 + [0.0] * 3


def test_config_keys_load():
    cfg = load_config(
        None,
        ['actor_rollout_ref.rollout.stop=["</answer>"]', "actor_rollout_ref.rollout.include_stop_str_in_output=true"],
    )
    assert cfg.actor_rollout_ref.rollout.stop == ["</answer>"]
    assert cfg.actor_rollout_ref.rollout.include_stop_str_in_output is True
