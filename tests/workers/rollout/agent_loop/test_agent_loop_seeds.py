"""One seeded request, two paths: the ``hf`` engine's ``generate_sequences`` and the agent loops
(``single_turn_agent`` over `HFTokenServer`) sample the same tokens from ``meta_info["seed"]`` alone,
because both take each row's seed from `verl.workers.rollout.layout.row_seeds`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.config.schema import RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.layout import prompt_position_ids, row_seeds
from verl.workers.rollout.request import TokenRequest

R, P = 10, 12


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def _batch(tok, seed: int, n: int = 4) -> DataProto:
    rows = [tok(f"{3 * i + 1}+{7 * i + 2}=", add_special_tokens=False)["input_ids"] for i in range(n)]
    ids = torch.full((n, P), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros(n, P, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, P - len(r) :], mask[i, P - len(r) :] = torch.tensor(r), 1
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": prompt_position_ids(mask)},
        non_tensors={"agent_name": np.array(["single_turn_agent"] * n, dtype=object)},
        meta_info={"pad_token_id": tok.pad_token_id, "seed": seed},
    )


def _config(**kw) -> RolloutConfig:
    return RolloutConfig(response_length=R, prompt_length=P, temperature=1.0, seed=0, **kw)


class _Recording:
    """Wraps a token engine and records the requests it receives."""

    def __init__(self, inner) -> None:
        self.inner, self.requests = inner, []

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    async def generate(self, request: TokenRequest):
        self.requests.append(request)
        return await self.inner.generate(request)


def test_meta_seed_gives_identical_tokens_direct_and_through_agent_loops(tiny, monkeypatch):
    from verl.workers.rollout.hf import hf_server

    model, tok = tiny
    direct = HFRollout(model, _config(), tok).generate_sequences(_batch(tok, 7))
    cfg = _config(mode="async")  # async: single-turn rows run through the agent loops, not the batched call
    loops = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok)
    recorders, serve = [], hf_server.as_token_engine

    def recording(engine):
        recorders.append(_Recording(serve(engine)))
        return recorders[-1]

    monkeypatch.setattr(hf_server, "as_token_engine", recording)
    looped = loops.generate_sequences(_batch(tok, 7))
    assert "num_turns" in looped.non_tensor_batch  # went through the agent loops
    sent = {int(r.request_id.split("-")[0]): r.seed for r in recorders[0].requests}
    assert [sent[i] for i in range(4)] == row_seeds(_batch(tok, 7).batch, {"seed": 7}).tolist()
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(looped.batch[key], direct.batch[key]), key
    assert torch.equal(looped.batch["rollout_log_probs"], direct.batch["rollout_log_probs"])
    assert direct.batch["response_mask"].sum() > 0

    other = loops.generate_sequences(_batch(tok, 8)).batch["responses"]
    assert not torch.equal(other, looped.batch["responses"])
    assert torch.equal(HFRollout(model, _config(), tok).generate_sequences(_batch(tok, 8)).batch["responses"], other)
