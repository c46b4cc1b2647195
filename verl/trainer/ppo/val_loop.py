"""The RL loop's validation pass (kept out of `verl.trainer.ppo.trainer`).

`run_validation` generates on the validation set with ``rollout.val_kwargs`` (``n`` samples per
prompt, its own sampling settings and per-row seeds), scores with the validation reward function
and aggregates verl's metrics per data source (`verl.trainer.ppo.validation`): ``val-core/...`` and
``val-aux/...`` over ``reward`` and every per-sample value the scorer reports (``acc``, ``pred``
for majority votes, ...), plus ``timing_s/testing``. ``trainer.log_val_generations`` samples and
the ``trainer.validation_data_dir`` dump are written here too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from verl.protocol import DataProto
from verl.trainer.ppo.metrics import timer
from verl.trainer.ppo.validation import validation_metrics

__all__ = ["run_validation"]


def run_validation(
    parts: Any,
    config: Any,
    global_step: int,
    gen_batch: Callable[..., DataProto],
    with_seeds: Callable[[DataProto, str], DataProto],
) -> dict[str, float]:
    """One pass over ``parts.val_dataloader``; returns the validation metrics (module docstring).

    Args:
        parts: the run's `TrainerParts` (worker groups, validation loader and reward function).
        config: the root config.
        global_step: the step the metrics and dumps are logged at.
        gen_batch: ``gen_batch(batch, validate=True)`` -> the generation inputs of a batch.
        with_seeds: ``with_seeds(gen, purpose)`` -> ``gen`` with its per-row sampling seeds.
    """
    vk, tcfg = config.actor_rollout_ref.rollout.val_kwargs, config.trainer
    sources: list[Any] = []
    uids: list[Any] = []
    infos: dict[str, list[Any]] = defaultdict(list)
    rows: list[dict[str, Any]] = []  # the dump rows (`verl.trainer.ppo.dumps.generation_rows`)
    timing: dict[str, float] = {}
    with timer("testing", timing):
        for batch_dict in parts.val_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array([f"val-{len(uids)}-{i}" for i in range(len(batch))], dtype=object)
            gen = gen_batch(batch, validate=True)
            seeded = with_seeds(gen.repeat(vk.n, interleave=True), f"val{len(uids)}")
            out = parts.actor_rollout_wg.generate_sequences(seeded)
            out.meta_info.pop("metrics", None)
            batch = batch.repeat(vk.n, interleave=True)
            batch.union(out)
            reward = parts.val_reward_fn(batch, return_dict=True)
            n = len(batch)
            infos["reward"] += reward["reward_tensor"].sum(-1).tolist()
            for key, values in (reward.get("reward_extra_info") or {}).items():
                if len(values) == n and key != "reward":
                    infos[key] += list(values)
            sources += list(batch.non_tensor_batch.get("data_source", ["unknown"] * n))
            uids += list(batch.non_tensor_batch["uid"])
            if tcfg.log_val_generations or tcfg.validation_data_dir:
                from verl.trainer.ppo.dumps import generation_rows

                extra = {k: v for k, v in (reward.get("reward_extra_info") or {}).items() if k != "reward"}
                rows += generation_rows(
                    batch,
                    parts.tokenizer,
                    global_step,
                    scores=reward["reward_tensor"].sum(-1),
                    extra=extra,
                    policy_version=global_step,
                )
    infos = {k: v for k, v in infos.items() if len(v) == len(uids)}
    _log_val_generations(tcfg, global_step, rows)
    return {**validation_metrics(sources, uids, infos), "timing_s/testing": timing["testing"]}


def _log_val_generations(tcfg: Any, global_step: int, rows: list[dict[str, Any]]) -> None:
    """``trainer.log_val_generations`` samples and the ``trainer.validation_data_dir`` dump of the pass's rows."""
    from verl.trainer.ppo.dumps import (
        dump_generations,
        log_val_generations,
        pick_val_generations,
    )

    if tcfg.log_val_generations:
        texts = [r["input"] for r in rows], [r["output"] for r in rows]
        samples = pick_val_generations(*texts, [r["score"] for r in rows], tcfg.log_val_generations)
        log_val_generations(samples, global_step, tcfg.output_dir)
    if tcfg.validation_data_dir:
        dump_generations(tcfg.validation_data_dir, global_step, rows)
