"""Which vLLM engine a rollout section gets, and the agent-loop manager's hooks for server engines.

Runs without vLLM: `serves_agent_loops` and the offline engine's refusal are plain Python, and
the manager's hooks (``token_engine`` wakes, ``sleep`` after the batch, ``returns_log_probs``)
are checked with a scripted engine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.workers.rollout.agent_loop.agent_helpers import ScriptedEngine, qwen_tokenizer
from verl.config.schema import AgentLoopConfig, MultiTurnConfig, RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.hf.hf_server import as_token_engine
from verl.workers.rollout.vllm.vllm_rollout import VLLMRollout, serves_agent_loops


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({}, False),
        ({"mode": "async"}, True),
        ({"multi_turn": MultiTurnConfig(enable=True, interaction_config_path="x.yaml")}, True),
        ({"over_sample_rate": 0.25}, True),
        ({"agent": AgentLoopConfig(default_agent_loop="tool_agent")}, True),
    ],
)
def test_agent_loop_configs_get_the_async_engine(kw, expected):
    assert serves_agent_loops(RolloutConfig(name="vllm", **kw)) is expected


def test_offline_engine_refuses_agent_loops_in_one_line():
    offline = object.__new__(VLLMRollout)  # no engine needed: the refusal comes first
    offline.serve_async = False
    with pytest.raises(
        ValueError, match="not supported yet on the offline vLLM engine: set actor_rollout_ref.rollout.mode=async"
    ) as err:
        as_token_engine(offline)
    assert "\n" not in str(err.value)


class _ServerLike:
    """An inner engine shaped like the vLLM server engine: token_engine / sleep / returns_log_probs."""

    def __init__(self, tok, returns_log_probs: bool) -> None:
        self.server = ScriptedEngine(tok, ["Four."] * 8)
        self.returns_log_probs = returns_log_probs
        self.pad_token_id, self.eos_token_id = tok.pad_token_id, self.server.eos_token_id
        self.calls: list[str] = []

    def token_engine(self):
        self.calls.append("wake")
        return self.server

    def sleep(self) -> None:
        self.calls.append("sleep")


def _batch(n: int = 2) -> DataProto:
    ids = torch.tensor([[0, 0, 9707, 11]] * n)
    mask = (ids != 0).long()
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors={"agent_name": np.array(["single_turn_agent"] * n, dtype=object)},
    )


@pytest.mark.parametrize("returns_log_probs", [True, False])
def test_manager_wakes_and_sleeps_a_server_engine_and_drops_missing_log_probs(shared_dir, returns_log_probs):
    tok = qwen_tokenizer()
    inner = _ServerLike(tok, returns_log_probs)
    out = AgentLoopRollout(
        inner, RolloutConfig(mode="async", response_length=8, prompt_length=4), tok
    ).generate_sequences(_batch())
    assert inner.calls == ["wake", "sleep"]  # woken once for the batch, asleep after its last trajectory
    assert ("rollout_log_probs" in out.batch.keys()) is returns_log_probs
    assert out.batch["response_mask"].sum(-1).tolist() == [3, 3]  # "Four." + <|im_end|>: model tokens either way


def test_rollout_on_its_own_resource_pool_accepts_vllm_with_lora():
    from verl.config import load_config
    from verl.config.compat.verl_keys_checks import check_conditional

    cfg = load_config(None, ["actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.model.lora_rank=4"])
    check_conditional(cfg)  # hf + LoRA on a separate pool is built
    cfg.actor_rollout_ref.rollout.name = "vllm"  # (vLLM need not be installed for the check itself)
    check_conditional(cfg)  # and so is vLLM + LoRA (tests/workers/rollout/vllm/test_vllm_split_lora.py runs it)
