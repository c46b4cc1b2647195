"""Streaming rewards on the rollout engines: every trajectory scored as soon as it finishes, equal to
scoring the finished batch; slow, hung and raising scorers contained per sample."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch

from verl.config.schema import ModelConfig, RolloutConfig
from verl.data.builtin_task import DATA_SOURCE
from verl.protocol import DataProto
from verl.reward import create_reward_manager
from verl.reward.streaming import RewardModelScorer, StreamingRewardScorer, merge_scored
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopRollout
from verl.workers.rollout.streaming import generate_and_score

N = 8


@pytest.fixture(scope="module")
def quickstart() -> tuple[Any, Any]:
    from verl.modules import create_model, load_tokenizer

    torch.manual_seed(0)
    return create_model("actor", ModelConfig(), device="cpu"), load_tokenizer(ModelConfig().path)


def _batch(tok: Any, n: int = N, width: int = 24) -> DataProto:
    from verl.data.rl_dataset import left_pad

    pairs = [(17 * i + 3, 29 * i + 5) for i in range(n)]
    texts = [
        tok.apply_chat_template([{"role": "user", "content": f"{a}+{b}"}], add_generation_prompt=True, tokenize=False)
        for a, b in pairs
    ]
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    ids, mask, pos = (torch.stack(t) for t in zip(*(left_pad(r, width, tok.pad_token_id) for r in rows)))
    gts = np.empty(n, dtype=object)
    for i, (a, b) in enumerate(pairs):
        gts[i] = {"style": "rule", "ground_truth": str(a + b)}
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": pos,
            "sample_seeds": torch.arange(100, 100 + n, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array([DATA_SOURCE] * n, dtype=object),
            "reward_model": gts,
            "extra_info": np.array([{"index": i} for i in range(n)], dtype=object),
        },
    )


def _engine(model: Any, tok: Any, **cfg: Any) -> HFRollout:
    return HFRollout(model, RolloutConfig(response_length=12, prompt_length=24, temperature=1.5, **cfg), tok)


def _score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> dict[str, Any]:
    """A custom function: length-dependent score, with the sample's index as an extra key."""
    if extra_info["index"] == 5 and ground_truth == "HANG":
        time.sleep(60)
    if extra_info["index"] == 3 and ground_truth == "RAISE":
        raise RuntimeError("broken scorer")
    return {"score": len(solution_str) / 10.0 + (solution_str.strip() == ground_truth), "index": extra_info["index"]}


def test_streamed_rewards_equal_batch_rewards_and_arrive_before_the_batch_ends(quickstart) -> None:
    model, tok = quickstart
    manager = create_reward_manager("naive", tok, compute_score=_score, timeout_s=5.0)
    engine = _engine(model, tok)
    calls: list[list[int]] = []
    scorer = StreamingRewardScorer(manager, max_workers=2, on_scored=lambda item: calls.append(item.rows))
    with scorer:
        out, streamed = generate_and_score(engine, _batch(tok), scorer)
    ref_out = _engine(model, tok).generate_sequences(_batch(tok))
    assert torch.equal(out.batch["responses"], ref_out.batch["responses"])  # the hook changes no token
    ref = manager(ref_out, return_dict=True)
    assert torch.equal(streamed["reward_tensor"], ref["reward_tensor"])
    assert streamed["reward_extra_info"]["index"] == list(range(N))
    assert streamed["reward_metrics"] == ref["reward_metrics"]
    lengths = out.batch["response_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1
    assert sorted(calls) == [[i] for i in range(N)]  # one scoring call per trajectory
    assert engine.on_trajectories_finished is None  # the hook is removed afterwards
    handed: list[tuple[list[int], int]] = []  # the hook itself: rows as they finish, during the call
    engine.on_trajectories_finished = lambda rows, data: handed.append(
        (rows, int(data.batch["response_mask"].sum(1).max()))
    )
    engine.generate_sequences(_batch(tok))
    assert len(handed) > 1 and handed[0][1] < int(lengths.max())  # the first rows came before the longest ended
    assert sorted(r for rows, _ in handed for r in rows) == list(range(N))


def test_hung_and_raising_scorers_are_contained_per_sample(quickstart) -> None:
    model, tok = quickstart
    batch = _batch(tok)
    batch.non_tensor_batch["reward_model"][5] = {"ground_truth": "HANG"}
    batch.non_tensor_batch["reward_model"][3] = {"ground_truth": "RAISE"}
    manager = create_reward_manager("naive", tok, compute_score=_score, timeout_s=0.5)
    start = time.perf_counter()
    with StreamingRewardScorer(manager, max_workers=2) as scorer:
        out, got = generate_and_score(_engine(model, tok), batch, scorer, timeout_s=30)
        elapsed = time.perf_counter() - start
    extra = got["reward_extra_info"]
    assert extra["reward_timeout"] == [i == 5 for i in range(N)]
    assert extra["reward_error"] == [i == 3 for i in range(N)]
    assert got["reward_metrics"]["reward/num_timeouts"] == 1.0 and got["reward_metrics"]["reward/num_errors"] == 1.0
    assert got["reward_tensor"][[3, 5]].abs().sum() == 0
    ok = [i for i in range(N) if i not in (3, 5)]
    expected = manager(out[torch.tensor(ok)], return_dict=True)["reward_tensor"]
    assert torch.equal(got["reward_tensor"][ok], expected)
    assert elapsed < 30  # the sleeping sample (60 s) held one thread for its deadline only


def test_agent_loop_trajectories_stream_one_by_one(quickstart) -> None:
    model, tok = quickstart
    cfg = RolloutConfig(response_length=12, prompt_length=24, temperature=1.5, mode="async")
    rollout = AgentLoopRollout(HFRollout(model, cfg, tok), cfg, tok)
    manager = create_reward_manager("naive", tok, compute_score=_score, timeout_s=5.0)
    rows_seen: list[list[int]] = []
    with StreamingRewardScorer(manager, on_scored=lambda item: rows_seen.append(item.rows)) as scorer:
        out, got = generate_and_score(rollout, _batch(tok), scorer)
    assert sorted(map(tuple, rows_seen)) == [(i,) for i in range(N)]  # one submission per trajectory
    assert torch.equal(got["reward_tensor"], manager(out, return_dict=True)["reward_tensor"])


class _FakeRewardModel:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def compute_rm_score(self, data: DataProto) -> DataProto:
        time.sleep(self.delay)
        mask = data.batch["response_mask"]
        scores = torch.zeros(mask.shape)
        scores[torch.arange(len(data)), mask.sum(1) - 1] = mask.sum(1).float()
        return DataProto.from_dict(tensors={"rm_scores": scores})


def test_reward_model_scorer_streams_and_times_out(quickstart) -> None:
    model, tok = quickstart
    with StreamingRewardScorer(RewardModelScorer(_FakeRewardModel())) as scorer:
        out, got = generate_and_score(_engine(model, tok), _batch(tok), scorer)
    assert torch.equal(got["reward_tensor"], _FakeRewardModel().compute_rm_score(out).batch["rm_scores"])
    slow = StreamingRewardScorer(RewardModelScorer(_FakeRewardModel(delay=5.0), timeout_s=0.2))
    fut = slow.submit(out[torch.tensor([0, 1])], [0, 1])
    merged = merge_scored([fut, slow.submit(out[torch.arange(2, N)], list(range(2, N)))], N, 12)
    assert merged["reward_extra_info"]["reward_timeout"][:2] == [True, True]
    assert merged["reward_metrics"]["reward/num_timeouts"] >= 2.0
    slow.close(wait=False)
    with pytest.raises(ValueError, match="exactly once"):
        merge_scored([], 2, 12)
