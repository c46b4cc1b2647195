"""One seeded request on vLLM, two paths: the engine's ``generate_sequences`` and the agent loops
(``single_turn_agent``) send vLLM the same per-request seeds, `verl.workers.rollout.layout.row_seeds`
of ``meta_info["seed"]``, and get the same tokens (CPU build, async engine: it serves both paths).

Run: ``VLLM_CPU_KVCACHE_SPACE=1 /work/vllm-venv/bin/python -m pytest -q -m vllm \
tests/workers/rollout/vllm/test_vllm_layout_seeds.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import tiny_vllm_lm
from torch import nn

from tests.workers.rollout.vllm.vllm_helpers import VLLM_MARKS
from verl.config.schema import RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout.layout import prompt_position_ids, row_seeds

pytestmark = [
    *VLLM_MARKS,
]

VOCAB, P, R = 128, 12, 8


def _tiny_lm() -> nn.Module:
    return tiny_vllm_lm(0, VOCAB)


def _config() -> RolloutConfig:
    return RolloutConfig(
        name="vllm",
        mode="async",
        prompt_length=P,
        response_length=R,
        temperature=1.0,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        seed=3,
    )


def _batch(seed: int, lengths=(5, 12, 3, 8)) -> DataProto:
    g = torch.Generator().manual_seed(1)
    ids = torch.zeros(len(lengths), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, P - n :] = torch.randint(3, VOCAB, (n,), generator=g)
        mask[i, P - n :] = 1
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": prompt_position_ids(mask)},
        non_tensors={"agent_name": np.array(["single_turn_agent"] * len(lengths), dtype=object)},
        meta_info={"seed": seed, "pad_token_id": 0},  # the padding of the prompts above
    )


@pytest.fixture(scope="module")
def engine():
    from verl.workers.rollout.vllm.vllm_rollout import build

    lm = _tiny_lm()
    eng = build(lm, _config(), None)
    try:
        eng.update_weights(lm)
        yield eng
    finally:
        eng.close()


def test_meta_seed_same_seeds_and_tokens_direct_and_through_agent_loops(engine, monkeypatch) -> None:
    from verl.workers.rollout.agent_loop import AgentLoopRollout

    backend = engine.backend
    assert engine.serve_async  # one async engine serves both paths
    batch_seeds: list[int | None] = []
    request_seeds: dict[int, int | None] = {}
    run_batch, generate = backend.run_batch, backend.generate

    def recording_run_batch(prompts, params, lora_request=None):
        batch_seeds.extend(p.seed for p in params)
        return run_batch(prompts, params, lora_request)

    async def recording_generate(request):
        request_seeds[int(request.request_id.split("-")[0])] = request.seed
        return await generate(request)

    monkeypatch.setattr(backend, "run_batch", recording_run_batch)
    monkeypatch.setattr(backend, "generate", recording_generate)
    expected = row_seeds(_batch(7).batch, {"seed": 7}).tolist()

    direct = engine.generate_sequences(_batch(7))
    assert batch_seeds == expected  # the seeds vLLM receives, one per request
    looped = AgentLoopRollout(engine, _config(), None).generate_sequences(_batch(7))
    assert "num_turns" in looped.non_tensor_batch  # mode=async: through the agent loops
    assert [request_seeds[i] for i in range(len(expected))] == expected
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(looped.batch[key], direct.batch[key]), key
    torch.testing.assert_close(looped.batch["rollout_log_probs"], direct.batch["rollout_log_probs"], atol=1e-5, rtol=0)
    assert direct.batch["response_mask"].sum() > 0

    other = engine.generate_sequences(_batch(8)).batch["responses"]
    assert not torch.equal(other, direct.batch["responses"])
    assert torch.equal(engine.generate_sequences(_batch(7)).batch["responses"], direct.batch["responses"])
