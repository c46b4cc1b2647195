"""An agent loop written against verl's ``verl.experimental.agent_loop`` API runs on the product's rollout.

A verl-style single-turn loop (``server_manager.generate`` with the row's prompt ids) reproduces
the built-in ``single_turn_agent`` token for token; a two-call loop shows the loop's own
``response_mask`` and ``num_turns`` reaching the batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.config.schema import ModelConfig, RolloutConfig
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout


@register("verl_style_single_turn")
class VerlStyleSingleTurn(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        text = self.tokenizer.apply_chat_template(
            list(kwargs["raw_prompt"]), add_generation_prompt=True, tokenize=False
        )
        prompt_ids = self.tokenizer.encode(text, add_special_tokens=False)
        out = await self.server_manager.generate(request_id="a", prompt_ids=prompt_ids, sampling_params=sampling_params)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            response_logprobs=out.log_probs,
            num_turns=2,
            metrics={"calls": 1},
        )


@register("verl_style_two_calls")
class VerlStyleTwoCalls(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        ids = list(self.tokenizer.encode("1+1=", add_special_tokens=False))
        first = await self.server_manager.generate(
            request_id="a", prompt_ids=ids, sampling_params={**sampling_params, "max_tokens": 3}
        )
        note = list(self.tokenizer.encode(" ok ", add_special_tokens=False))
        second = await self.server_manager.generate(
            request_id="b",
            prompt_ids=ids + first.token_ids + note,
            sampling_params={**sampling_params, "max_tokens": 3},
        )
        resp = first.token_ids + note + second.token_ids
        mask = [1] * len(first.token_ids) + [0] * len(note) + [1] * len(second.token_ids)
        return AgentLoopOutput(prompt_ids=ids, response_ids=resp, response_mask=mask, num_turns=4)


@pytest.fixture(scope="module")
def quickstart():
    from verl.modules import create_model, load_tokenizer

    torch.manual_seed(0)
    return create_model("actor", ModelConfig(), device="cpu"), load_tokenizer(ModelConfig().path)


def _batch(tok, agent: str, n: int = 3, width: int = 24) -> DataProto:
    from verl.data.rl_dataset import left_pad

    chats = [[{"role": "user", "content": f"{11 * i + 3}+{7 * i + 5}="}] for i in range(n)]
    rows = [
        tok(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
        for c in chats
    ]
    ids, mask, pos = (torch.stack(t) for t in zip(*(left_pad(r, width, tok.pad_token_id) for r in rows)))
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": pos,
            "sample_seeds": torch.arange(50, 50 + n, dtype=torch.long),
        },
        non_tensors={
            "raw_prompt": np.array(chats + [None], dtype=object)[:-1],
            "agent_name": np.array([agent] * n, dtype=object),
        },
        meta_info={"pad_token_id": tok.pad_token_id},
    )


def test_verl_api_loop_equals_builtin_single_turn(quickstart):
    model, tok = quickstart
    cfg = RolloutConfig(response_length=10, prompt_length=24, temperature=1.0, mode="async")
    ref = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(_batch(tok, "single_turn_agent"))
    out = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(
        _batch(tok, "verl_style_single_turn")
    )
    for key in ("responses", "response_mask", "input_ids"):
        assert torch.equal(out.batch[key], ref.batch[key]), key
    assert torch.allclose(out.batch["rollout_log_probs"], ref.batch["rollout_log_probs"], atol=1e-6)
    assert out.non_tensor_batch["num_turns"].tolist() == [2, 2, 2]


def test_verl_api_loop_masks_and_turns_reach_the_batch(quickstart):
    model, tok = quickstart
    cfg = RolloutConfig(response_length=12, prompt_length=24, temperature=1.0, mode="async")
    out = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(_batch(tok, "verl_style_two_calls"))
    note = len(tok.encode(" ok ", add_special_tokens=False))
    mask = out.batch["response_mask"]
    assert (mask.sum(-1) <= 6).all() and (mask.sum(-1) >= 2).all()
    assert int((mask[0] == 0).sum()) >= note  # the inserted text is not model-generated
    assert out.non_tensor_batch["num_turns"].tolist() == [4, 4, 4]


def test_agent_loop_config_path_registers_verl_loops(tmp_path, quickstart, monkeypatch):
    """verl's ``agent.agent_loop_config_path``: a YAML list of {name, _target_} (extra keys to the constructor)."""
    import sys

    pkg = tmp_path / "my_loops.py"
    pkg.write_text(
        "from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput\n"
        "class Echo(AgentLoopBase):\n"
        "    def __init__(self, *args, prefix='', **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        "        self.prefix = prefix\n"
        "    async def run(self, sampling_params, **kwargs):\n"
        "        ids = self.tokenizer.encode(self.prefix, add_special_tokens=False)\n"
        "        out = await self.server_manager.generate(request_id='x', prompt_ids=ids, "
        "sampling_params={**sampling_params, 'max_tokens': 2})\n"
        "        return AgentLoopOutput(prompt_ids=ids, response_ids=out.token_ids, "
        "response_mask=[1] * len(out.token_ids), num_turns=2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yaml = tmp_path / "agent_loops.yaml"
    yaml.write_text("- name: echo_loop\n  _target_: my_loops.Echo\n  prefix: '3+4='\n")
    model, tok = quickstart
    cfg = RolloutConfig(response_length=4, prompt_length=24, temperature=1.0, mode="async")
    cfg.agent.agent_loop_config_path = str(yaml)
    out = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(_batch(tok, "echo_loop"))
    assert out.batch["response_mask"].sum(-1).tolist() == [2, 2, 2]
    assert "my_loops" in sys.modules
