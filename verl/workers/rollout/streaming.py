"""Finish hooks of the rollout engines, and generation with streaming rewards.

An engine with an ``on_trajectories_finished`` attribute calls it as ``hook(rows, data)`` the
moment rows finish, before the generation call returns: ``rows`` are their indices in the prompt
batch, ``data`` their output rows in the engine's usual layout (`HFRollout.generate_sequences`).
The ``hf`` engine calls it from its decode loop (rows that stop early are handed over while the
others still decode), the agent loops when a trajectory's coroutine ends. `generate_and_score`
wires the hook to a `verl.reward.streaming.StreamingRewardScorer`, so the reward of the first
trajectories overlaps the generation of the last ones.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from verl.protocol import DataProto
from verl.reward.streaming import ScoredItem, StreamingRewardScorer, merge_scored
from verl.workers.rollout.partial import Carried

__all__ = ["FinishHook", "generate_and_score", "row_notifier"]

FinishHook = Callable[[list[int], DataProto], None]


def row_notifier(
    engine: Any,
    prompts: DataProto,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    meta: dict[str, Any],
    hook: FinishHook,
    rows: torch.Tensor,
) -> Callable[..., None]:
    """The ``notify`` callback of one `HFRollout` micro-batch: maps its local rows to the batch's
    and hands their assembled output rows to ``hook``.

    Args:
        engine: the `HFRollout` (its ``_assemble`` builds the rows).
        prompts, input_ids, attention_mask, position_ids: the call's batch and its prompt part.
        meta: the output meta info.
        hook: ``hook(rows, data)``.
        rows: `(b,)` the micro-batch's row indices in the batch.
    """

    def notify(
        local: torch.Tensor,
        responses: torch.Tensor,
        lengths: torch.Tensor,
        log_probs: torch.Tensor,
        versions: torch.Tensor,
    ) -> None:
        index = rows[local]
        carried = Carried(responses, log_probs, versions, lengths, torch.ones(len(index), dtype=torch.bool))
        data = engine._assemble(
            prompts[index], input_ids[index], attention_mask[index], position_ids[index], carried, meta
        )
        hook(index.tolist(), data)

    return notify


def generate_and_score(
    engine: Any, prompts: DataProto, scorer: StreamingRewardScorer, timeout_s: float | None = None, per_row: bool = True
) -> tuple[DataProto, dict[str, Any]]:
    """Generate ``prompts`` and score every trajectory as soon as it finishes.

    Args:
        engine: a rollout engine with an ``on_trajectories_finished`` attribute (`HFRollout`,
            `verl.workers.rollout.agent_loop.AgentLoopRollout`); it is restored afterwards.
        prompts: the prompt batch (``rollout.n`` repeats already made).
        scorer: where the finished rows go.
        timeout_s: longest wait for each scoring result after generation (None = no limit).
        per_row: score every trajectory in its own call (`StreamingRewardScorer.submit_each`);
            False keeps the rows handed over together in one call (a batched scorer).

    Returns:
        (the engine's output, the reward in the reward managers' layout: ``reward_tensor`` `(B, R)`,
        ``reward_extra_info``, ``reward_metrics``). Rows the engine did not report (interrupted or
        failed ones) are scored after the call.

    Raises:
        TypeError: the engine has no finish hook.
    """
    if not hasattr(engine, "on_trajectories_finished"):
        raise TypeError(f"{type(engine).__name__} has no on_trajectories_finished hook: streaming rewards need one")
    futures: list[Future[ScoredItem]] = []
    reported: set[int] = set()

    def hook(rows: list[int], data: DataProto) -> None:
        reported.update(rows)
        futures.extend(scorer.submit_each(data, rows) if per_row else [scorer.submit(data, rows)])

    previous = engine.on_trajectories_finished
    engine.on_trajectories_finished = hook
    try:
        out = engine.generate_sequences(prompts)
    finally:
        engine.on_trajectories_finished = previous
    rest = [i for i in range(len(out)) if i not in reported]
    if rest:
        futures.append(scorer.submit(out[torch.tensor(rest)], rest))
    return out, merge_scored(futures, len(out), out.batch["responses"].shape[1], timeout_s)
