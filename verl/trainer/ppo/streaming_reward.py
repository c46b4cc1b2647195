"""Streaming rewards in the RL loops: each trajectory is scored the moment the rollout finishes it.

``reward_model.streaming`` (default true) and ``reward_model.num_workers`` (scoring threads,
verl's ``reward.num_workers``; None = 8, verl's default). A generation call of the synchronous step
(`RLTrainer.train_step`) or of the ``separate_async`` rollout thread (`Rollouter`) goes through
`StreamingRewards.generate`: it installs a finish hook on the rollout engine
(`verl.workers.rollout.streaming`), and every trajectory the engine hands over is joined with its
prompt's non-tensor fields (``data_source``, ``reward_model``, ``extra_info``, ...) and submitted to
a `verl.reward.streaming.StreamingRewardScorer`, whose threads score it while the other rows still
decode. After the call the trainer's reward stage only waits for the last scores
(`PendingReward.result`), then proceeds exactly as when scoring after generation.

What streams (anything else is scored after generation, as before, with the same result):

* the engine: the in-process ``hf`` engine (its decode loop hands rows that stop early) and the
  agent loops (a trajectory whose coroutine ended, on any inner engine) of a local worker group
  (``trainer.backend=local``). A Ray rollout group runs the engine in another process: its hook
  cannot reach the driver's scorer. The plain ``vllm`` engine returns the whole batch at once.
* the scorer: rule scorers and custom ``compute_score`` functions of the per-sample managers
  (``naive`` / ``dapo`` / ``gdpo``): one manager call per trajectory, each under the manager's own
  per-sample deadline (``reward_model.timeout_s``), so a raising or hung scorer costs its sample
  a 0 reward and a ``reward_error`` / ``reward_timeout`` flag, counted in ``reward/num_errors`` /
  ``reward/num_timeouts`` as today, in one thread, while the others go on. The ``batch`` manager
  and custom managers (``reward_manager.module.path``) may score a batch as a whole (a group
  normalisation): scored after generation.
* a reward model with its own pool (``reward_model.placement=separate`` or verl's
  ``enable_resource_pool``): the rows the engine hands over together form one micro-batch of
  ``compute_rm_score``. A colocated reward model shares the device with generation (as in verl's
  V1 trainer, whose streaming reward path also requires the reward model's own pool): scored
  after generation.

Equal results: every per-sample manager scores each row independently of the others, so the
merged ``reward_tensor`` `(B, R)`, the per-sample ``reward_extra_info`` and the summed
``reward_metrics`` counts equal one call on the whole batch. One difference: the batch call stops
waiting for a scorer after 3 timeouts in a row; per row every sample gets its own deadline.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from verl.config.errors import ConfigError
from verl.protocol import DataProto
from verl.reward.managers import NaiveRewardManager
from verl.reward.streaming import ScoredItem, StreamingRewardScorer, merge_scored
from verl.single_controller.local import LocalWorkerGroup

__all__ = ["DEFAULT_WORKERS", "PendingReward", "StreamingRewards", "build_streaming_rewards", "finish_hook_engine"]

DEFAULT_WORKERS = 8  # verl's reward.num_workers default


def finish_hook_engine(wg: Any) -> Any | None:
    """The in-process rollout engine of a worker group that has an ``on_trajectories_finished``
    hook, or None (a Ray group, an engine without one).

    Args:
        wg: the actor-rollout group (colocated: its worker's `SyncedRollout` holds the engine), a
            `SplitActorRollout` (its ``rollout_wg``), or a rollout group.
    """
    wg = getattr(wg, "rollout_wg", wg)
    if not isinstance(wg, LocalWorkerGroup) or len(wg.workers) != 1:
        return None
    rollout = getattr(wg.workers[0], "rollout", None)
    for engine in (rollout, getattr(rollout, "engine", None)):
        if engine is not None and hasattr(engine, "on_trajectories_finished"):
            return engine
    return None


@dataclass
class PendingReward:
    """The scores of one generation call, some still being computed.

    Attributes:
        futures: one per submission (rows handed over by the engine).
        reported: the batch rows already submitted.
    """

    scorer: StreamingRewardScorer
    per_row: bool
    futures: list[Future[ScoredItem]] = field(default_factory=list)
    reported: set[int] = field(default_factory=set)

    def result(self, batch: DataProto, timeout_s: float | None = None) -> dict[str, Any]:
        """Score the rows the engine did not hand over (interrupted, failed), wait for every score.

        Args:
            batch: the scored batch (prompt rows repeated ``rollout.n`` times, joined with the
                generation output), `B` rows.
            timeout_s: longest wait for each result (None = none).

        Returns:
            The reward managers' layout: ``reward_tensor`` `(B, R)`, ``reward_extra_info``
            (lists of B), ``reward_metrics`` (summed counts).

        Raises:
            Exception: what the reward function itself raised (not a contained sample).
        """
        rest = [i for i in range(len(batch)) if i not in self.reported]
        if rest:
            rows = batch[torch.tensor(rest)]
            self.futures += self.scorer.submit_each(rows, rest) if self.per_row else [self.scorer.submit(rows, rest)]
        return merge_scored(self.futures, len(batch), batch.batch["responses"].shape[1], timeout_s)


class StreamingRewards:
    """Generation calls whose trajectories are scored as they finish (module docstring).

    Args:
        reward_fn: ``fn(data, return_dict=True)`` in the reward managers' layout.
        workers: scoring threads (>= 1).
        per_row: one call per trajectory (rule scorers) or per handed-over chunk (a reward model).
    """

    def __init__(self, reward_fn: Any, workers: int, per_row: bool) -> None:
        self.scorer = StreamingRewardScorer(reward_fn, max_workers=workers)
        self.per_row = per_row

    def generate(self, wg: Any, gen: DataProto, prompts: DataProto) -> tuple[DataProto, PendingReward | None]:
        """``wg.generate_sequences(gen)``, scoring each trajectory as the engine finishes it.

        Args:
            wg: the worker group that generates.
            gen: the generation batch, `B` rows (``rollout.n`` repeats made).
            prompts: the prompt rows matching ``gen`` row for row (their non-tensor fields join
                each trajectory for the scorer).

        Returns:
            (the output, the pending scores; None when the group's engine has no finish hook:
            score after generation).
        """
        engine = finish_hook_engine(wg)
        if engine is None:
            return wg.generate_sequences(gen), None
        pending = PendingReward(self.scorer, self.per_row)
        keys = list(prompts.non_tensor_batch)

        def hook(rows: list[int], data: DataProto) -> None:
            index = np.asarray(rows)
            part = DataProto.from_dict(non_tensors={k: prompts.non_tensor_batch[k][index] for k in keys})
            part.union(data)
            pending.reported.update(rows)
            pending.futures.extend(
                self.scorer.submit_each(part, rows) if self.per_row else [self.scorer.submit(part, rows)]
            )

        previous, engine.on_trajectories_finished = engine.on_trajectories_finished, hook
        try:
            out = wg.generate_sequences(gen)
        finally:
            engine.on_trajectories_finished = previous
        return out, pending

    def close(self) -> None:
        """Stop the scoring threads (after the calls in flight)."""
        self.scorer.close()


class _RewardModelCall:
    """``compute_rm_score`` in the reward managers' layout (errors are raised, as without streaming)."""

    def __init__(self, rm_wg: Any) -> None:
        self.rm_wg = rm_wg

    def __call__(self, data: DataProto, return_dict: bool = True) -> dict[str, Any]:
        return {
            "reward_tensor": self.rm_wg.compute_rm_score(data).batch["rm_scores"],
            "reward_extra_info": {},
            "reward_metrics": {},
        }


def build_streaming_rewards(cfg: Any, reward_fn: Any, rm_wg: Any) -> StreamingRewards | None:
    """The run's `StreamingRewards`, or None where rewards are scored after generation.

    Args:
        cfg: the root config (``reward_model``, ``reward_manager``).
        reward_fn: the training reward manager.
        rm_wg: the reward-model group, None without one.

    Raises:
        ConfigError: ``reward_model.num_workers`` < 1.
    """
    rm = cfg.reward_model
    workers = DEFAULT_WORKERS if rm.num_workers is None else int(rm.num_workers)
    if workers < 1:
        raise ConfigError(f"reward_model.num_workers: scoring threads of streaming rewards must be >= 1, got {workers}")
    if not rm.streaming:
        return None
    if rm_wg is not None:
        if rm.placement != "separate" and not rm.enable_resource_pool:
            return None  # shares the device with generation: scored after it
        return StreamingRewards(_RewardModelCall(rm_wg), workers, per_row=False)
    if type(reward_fn) is not NaiveRewardManager:
        return None  # a manager that may score the batch as a whole
    return StreamingRewards(reward_fn, workers, per_row=True)
