"""Multi-turn trajectories from a real (random) Qwen2 model through the ``hf`` request API:

- the assembled batch: response_mask 1 exactly on sampled tokens, attention over every real token;
- rollout_log_probs of model tokens equal the training forward over the whole trajectory;
- the same trajectory as one turn (earlier turns moved into the prompt) vs split over turns gives
  identical log-probs on the model tokens;
- agent-loop metrics and the trajectory dump.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.workers.rollout.agent_loop.agent_helpers import RetryOnceInteraction
from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.modules.forward import compute_log_probs
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.trainer.ppo.dumps import dump_generations, generation_rows
from verl.workers.rollout.trajectories import agent_loop_metrics

R = 40


@pytest.fixture(scope="module")
def model_and_tok(shared_dir, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.modules.init_model import main as init_model_main

    out = tmp_path_factory.mktemp("qwen_tiny_agent")
    tok_dir = shared_dir / "tokenizers" / "qwen2.5"
    assert init_model_main(["--arch", "qwen2", "--size", "tiny", "--tokenizer", str(tok_dir), "--out", str(out)]) == 0
    return AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(tok_dir)


def _batch(tok, n: int = 3) -> DataProto:
    msgs = [[{"role": "user", "content": f"Question {i}: what is {i}+{i}?"}] for i in range(n)]
    extra = [{"index": i, "interaction_kwargs": {"name": "retry"}} for i in range(n)]
    raw = np.empty(n, dtype=object)
    for i, m in enumerate(msgs):
        raw[i] = m
    ids = torch.zeros(n, 4, dtype=torch.long)  # tool_agent renders its prompt from the messages
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(4).repeat(n, 1),
            "sample_seeds": torch.tensor([11, 22, 33]),
        },
        non_tensors={
            "raw_prompt": raw,
            "extra_info": np.array(extra, dtype=object),
            "agent_name": np.array(["tool_agent"] * n, dtype=object),
            "uid": np.array([f"u{i}" for i in range(n)], dtype=object),
        },
        # many stop ids so the random model ends its turns early and the interaction answers
        meta_info={"pad_token_id": tok.pad_token_id, "eos_token_id": list(range(0, 151643, 5))},
    )


@pytest.fixture(scope="module")
def rollout(model_and_tok, tmp_path_factory):
    model, tok = model_and_tok
    yaml = tmp_path_factory.mktemp("interaction") / "interaction.yaml"
    yaml.write_text(
        f"interaction:\n  - name: retry\n    class_name: {RetryOnceInteraction.__module__}.RetryOnceInteraction\n"
        "    config: {}\n"
    )
    cfg = RolloutConfig(
        response_length=R,
        prompt_length=64,
        temperature=1.0,
        multi_turn=MultiTurnConfig(
            enable=True, interaction_config_path=str(yaml), max_user_turns=2, tokenization_sanity_check_mode="disable"
        ),
    )
    return AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok).generate_sequences(_batch(tok))


def test_masks_and_layout(rollout):
    b = rollout.batch
    mask, attn = b["response_mask"], b["attention_mask"][:, -R:]
    assert mask.shape == (3, R) and b["input_ids"].shape == (3, 64 + R)
    assert bool((mask <= attn).all())
    assert bool(((attn - mask) == 1).any()), "some user-turn tokens (mask 0, attention 1)"
    assert (b["rollout_log_probs"][mask == 0] == 0).all()
    assert (b["rollout_log_probs"][mask == 1] < 0).all()
    # attention covers a contiguous prefix of the response; positions count real tokens
    lengths = attn.sum(-1)
    assert torch.equal(attn, (torch.arange(R) < lengths[:, None]).long())
    full = b["attention_mask"]
    assert torch.equal(b["position_ids"][full == 1], ((full.cumsum(-1) - 1)[full == 1]))
    assert max(rollout.non_tensor_batch["num_turns"]) >= 3


def test_rollout_log_probs_equal_training_forward_and_one_turn_split(model_and_tok, rollout):
    model, _ = model_and_tok
    b = rollout.batch
    mask = b["response_mask"].bool()
    with torch.no_grad():
        fwd = compute_log_probs(model, b["input_ids"], b["attention_mask"], b["position_ids"], R)
    assert torch.allclose(fwd[mask], b["rollout_log_probs"][mask], atol=2e-4)
    # one turn: everything before the last model turn moves into the prompt; the last turn is the response
    row = 0
    m = mask[row].long().tolist()
    last_start = max(i for i in range(R) if m[i] == 1 and (i == 0 or m[i - 1] == 0))
    width = 64 + last_start
    ids, attn, pos = b["input_ids"][row : row + 1], b["attention_mask"][row : row + 1], b["position_ids"][row : row + 1]
    with torch.no_grad():
        one_turn = compute_log_probs(model, ids, attn, pos, ids.shape[1] - width)
    tail = mask[row, last_start:]
    assert torch.allclose(one_turn[0][tail], fwd[row, last_start:][tail], atol=1e-6)


def test_metrics_and_dump(model_and_tok, rollout, tmp_path):
    _, tok = model_and_tok
    metrics = agent_loop_metrics(rollout)
    turns = rollout.non_tensor_batch["num_turns"].tolist()
    assert metrics["num_turns/max"] == max(turns) and metrics["num_turns/min"] == min(turns)
    assert metrics["tool_call_counts/max"] == 0.0
    batch = rollout.select(deepcopy=True)
    batch.batch["token_level_scores"] = torch.zeros(3, R)
    batch.non_tensor_batch["reward_model"] = np.array([{"ground_truth": "2"}] * 3, dtype=object)
    path = dump_generations(tmp_path, 7, generation_rows(batch, tok, 7))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.name == "7.jsonl" and len(rows) == 3
    assert rows[0]["num_turns"] == turns[0] and rows[0]["messages"][0]["role"] == "user"
    assert "Try again." in rows[0]["output"] and rows[0]["turn_scores"] and rows[0]["gts"] == "2"
    assert rows[0]["score"] == 0.0 and rows[0]["step"] == 7 and "Question 0" in rows[0]["input"]
