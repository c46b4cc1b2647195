"""``colocate_async`` through the agent loops: the built-in ``calculator`` preset (tool_agent, the
tiny tool-calling model) with a warm-up batch. The step-1 call is paused in place once 4 groups
are finished; a trajectory whose tool call is pending across that cut continues at step 2 under
the new weights, and its layout is right: the turn before the call sampled by version 0, the tool
output masked 0 with no version, the turn after it sampled by version 1. Without warm-up the
threaded call equals the synchronous run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from run_helpers import read_metrics
from tests.trainer.ppo.test_split_rollout import assert_same_metrics

from verl.config import load_config
from verl.tools.calculator import CalculatorTool
from verl.trainer import RLTrainer
from verl.trainer.async_rl import build_async_loop
from verl.trainer.async_rl.colocate import ColocateAsyncLoop
from verl.workers.rollout.partial import NOT_SAMPLED


class CutSpanningCalculator(CalculatorTool):
    """The calculator; its first call returns only once the engine is paused (the long-tail cut)."""

    engine: Any = None
    expressions: list[str] = []

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[Any, float, dict]:
        if not self.expressions:
            self.expressions.append(str(parameters.get("expression")))
            await asyncio.to_thread(_wait_for_pause, self.engine, 300.0)
        return await super().execute(instance_id, parameters, **kwargs)


def _wait_for_pause(engine: Any, limit_s: float) -> None:
    end = time.monotonic() + limit_s
    while not engine._gate.paused and time.monotonic() < end:
        time.sleep(0.01)


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in ``mask``."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def _calculator(run_dir: Path, *extra: str) -> list[str]:
    return [
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "data.val_files=[]",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        f"trainer.output_dir={run_dir / 'out'}",
        f"trainer.default_local_dir={run_dir / 'ckpt'}",
        *extra,
    ]


@pytest.mark.e2e
def test_agent_loops_without_warm_up_equal_the_synchronous_run(tmp_path):
    # the threaded call with streamed scores vs sync scoring after generation: same tokens, scores, updates
    RLTrainer(config=load_config("calculator", _calculator(tmp_path / "sync", "reward_model.streaming=false"))).fit()
    RLTrainer(
        config=load_config(
            "calculator",
            _calculator(
                tmp_path / "colo",
                "trainer.v1.trainer_mode=colocate_async",
                "trainer.v1.colocate_async.num_warmup_batches=0",
                "trainer.v1.sampler.max_off_policy_threshold=0",
            ),
        )
    ).fit()
    sync, colo = read_metrics(tmp_path / "sync"), read_metrics(tmp_path / "colo")
    assert assert_same_metrics(sync, colo, tol=1e-6, b_may_add=True) > 50
    assert max(sync[s]["tool_call_counts/max"] for s in sync) >= 1.0  # trajectories called the tool
    assert all(colo[s]["colocate_async/long_tail_cut"] == 0.0 for s in colo)


@pytest.mark.e2e
def test_a_tool_call_spanning_the_cut_continues_under_the_next_weights_with_its_masks(tmp_path):
    # validation after each step (8 held-out prompts): the paused call first finishes under the new weights
    cfg = load_config(
        "calculator",
        _calculator(
            tmp_path,
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=1",
            "trainer.test_freq=1",
            "data.val_files=[builtin://calculator/test]",
            "data.val_max_samples=8",
        ),
    )
    trainer = RLTrainer(config=cfg)
    loop = build_async_loop(trainer)
    assert isinstance(loop, ColocateAsyncLoop) and loop.agent
    agent_rollout = loop.engine
    tool = CutSpanningCalculator(
        dict(agent_rollout.tools["calculator"].config), agent_rollout.tools["calculator"].tool_schema
    )
    tool.engine, tool.expressions = agent_rollout.engine, []
    agent_rollout.tools["calculator"] = tool
    batches: list = []
    update = trainer._update_stages

    def record(batch, metrics, timing):
        b = batch.batch
        batches.append(
            (
                list(batch.non_tensor_batch["uid"]),
                b["rollout_policy_versions"].clone(),
                b["response_mask"].clone(),
                b["responses"].clone(),
                list(batch.non_tensor_batch["tool_calls"]),
            )
        )
        return update(batch, metrics, timing)

    trainer._update_stages = record
    try:
        history = loop.run()
    finally:
        trainer.close()
    assert tool.expressions, "the warm-started model called the calculator"
    assert history[0]["colocate_async/long_tail_cut"] == 1.0 and history[0]["colocate_async/carried_groups"] >= 1.0
    assert loop._open is None and not loop._paused  # the run ended with no call left parked
    assert all("val/accuracy" in h for h in history)  # validation ran with a call paused after step 1
    uids, versions, mask, responses, calls = batches[1]
    assert torch.equal(versions >= 0, mask.bool())  # tool tokens and padding: no policy sampled them
    rows = [i for i in range(len(uids)) if calls[i] and calls[i][0]["arguments"] == {"expression": tool.expressions[0]}]
    assert rows, "the trajectory whose call spanned the cut was trained at step 2"
    row = rows[0]
    runs = _runs(mask[row].tolist())
    assert [v for v, _, _ in runs[:3]] == [1, 0, 1]  # assistant turn, tool output, assistant turn
    (_, a0, a1), (_, t0, t1), (_, b0, b1) = runs[:3]
    assert (versions[row, a0:a1] == 0).all()  # sampled before the cut
    assert (versions[row, t0:t1] == NOT_SAMPLED).all()
    assert (versions[row, b0:b1] == 1).all()  # the turn after the pending call: the weights of step 2
    assert "<tool_response>" in loop.p.tokenizer.decode(responses[row, t0:t1].tolist())
    assert history[1]["training/off_policy/trajectory_spans/max"] == 2.0
    assert history[1]["training/off_policy/trajectory_staleness_worst/max"] == 1.0
