"""Load-time checks of ``trainer.v1.*`` (verl's trainer modes), across the sections they touch.

Every refused value is one line naming its key. The rules for ``separate_async`` are verl's
(``verl/trainer/ppo/v1/trainer_separate_async.py``): ``data.train_batch_size = parameter_sync_step
x actor.ppo_mini_batch_size`` (one RL step = ``parameter_sync_step`` mini-batches, one weight
sync); the rollout is standalone on its own pool (finalize sets ``hybrid_engine=false``), and
``data.gen_batch_size`` (verl's fetch granularity) must divide the train batch. ``colocate_async``
(`verl.trainer.async_rl.colocate`) runs on the in-process hybrid ``hf`` engine, whose finish hook
cuts the long tail (agent loops: paused in place, `verl.trainer.async_rl.colocate_agent`, one
in-process worker only); on Ray workers nothing is cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl.config.errors import ConfigError, did_you_mean, not_supported
from verl.config.schema_v1 import OFF_POLICY_STRATEGIES, TRAINER_MODES

if TYPE_CHECKING:
    from verl.config.schema import RootConfig

__all__ = ["check_trainer_v1"]

_P = "trainer.v1"


def check_trainer_v1(cfg: RootConfig) -> None:
    """Refuse ``trainer.v1`` values that cannot run (one-line `ConfigError`)."""
    v1 = cfg.trainer.v1
    if v1.trainer_mode not in TRAINER_MODES:
        raise ConfigError(
            f"{_P}.trainer_mode: must be one of {sorted(TRAINER_MODES)}, got {v1.trainer_mode!r}"
            f"{did_you_mean(v1.trainer_mode, TRAINER_MODES)}"
        )
    s = v1.sampler
    if s.max_off_policy_strategy not in OFF_POLICY_STRATEGIES:
        raise ConfigError(
            f"{_P}.sampler.max_off_policy_strategy: must be drop or wait, got {s.max_off_policy_strategy!r}"
        )
    if s.max_off_policy_threshold < 0:
        raise ConfigError(
            f"{_P}.sampler.max_off_policy_threshold: must be >= 0 (versions a group may span), "
            f"got {s.max_off_policy_threshold}"
        )
    if bool(s.custom_sampler.path) != bool(s.custom_sampler.name):
        raise ConfigError(
            f"{_P}.sampler.custom_sampler: set both path and name (got path={s.custom_sampler.path!r}, "
            f"name={s.custom_sampler.name!r})"
        )
    if s.sampler_kwargs and not s.custom_sampler.path:
        raise ConfigError(
            f"{_P}.sampler.sampler_kwargs: only a custom sampler takes keyword arguments; set "
            f"{_P}.sampler.custom_sampler.{{path,name}} or remove them"
        )
    if v1.trainer_mode == "colocate_async":
        _check_colocate_async(cfg)
    if v1.trainer_mode == "separate_async":
        _check_separate_async(cfg)


def _check_separate_async(cfg: RootConfig) -> None:
    sa = cfg.trainer.v1.separate_async
    actor, algo = cfg.actor_rollout_ref.actor, cfg.algorithm
    if sa.parameter_sync_step < 1:
        raise ConfigError(f"{_P}.separate_async.parameter_sync_step: must be >= 1, got {sa.parameter_sync_step}")
    if sa.num_warmup_batches < 0:
        raise ConfigError(f"{_P}.separate_async.num_warmup_batches: must be >= 0, got {sa.num_warmup_batches}")
    if sa.hybrid_rollout.enable_switch:
        raise not_supported(
            f"{_P}.separate_async.hybrid_rollout.enable_switch",
            "lending trainer devices to the rollout is not built; leave it false",
        )
    if cfg.trainer.v1.sampler.sync_refill_failed_groups:
        raise not_supported(
            f"{_P}.sampler.sync_refill_failed_groups", "it applies to verl's sync sampling only; leave it false"
        )
    if cfg.data.gen_batch_size is not None and (
        cfg.data.gen_batch_size <= 0 or cfg.data.train_batch_size % cfg.data.gen_batch_size
    ):
        raise ConfigError(
            f"data.gen_batch_size: {cfg.data.gen_batch_size} must divide data.train_batch_size "
            f"({cfg.data.train_batch_size}): prompts are fetched in whole generation batches"
        )
    if cfg.data.gen_batch_size not in (None, cfg.data.train_batch_size) and cfg.trainer.total_training_steps is None:
        raise ConfigError(
            "trainer.total_training_steps: must be set when data.gen_batch_size differs from "
            "data.train_batch_size in separate_async (the data loader then counts generation batches)"
        )
    if cfg.data.train_batch_size != sa.parameter_sync_step * actor.ppo_mini_batch_size:
        raise ConfigError(
            f"{_P}.separate_async.parameter_sync_step: data.train_batch_size ({cfg.data.train_batch_size}) "
            f"must equal parameter_sync_step ({sa.parameter_sync_step}) x actor_rollout_ref.actor."
            f"ppo_mini_batch_size ({actor.ppo_mini_batch_size}), as in verl"
        )
    if algo.filter_groups.enable:
        raise not_supported(
            "algorithm.filter_groups.enable",
            "DAPO group filtering with trainer.v1.trainer_mode=separate_async is not built; use trainer_mode=sync",
        )
    if algo.adv_estimator == "remax":
        raise not_supported(
            "algorithm.adv_estimator",
            "remax (a greedy baseline per prompt) with "
            "trainer.v1.trainer_mode=separate_async is not built; use grpo, rloo or gae",
        )


def _check_colocate_async(cfg: RootConfig) -> None:
    ca, arr = cfg.trainer.v1.colocate_async, cfg.actor_rollout_ref
    rollout, algo, tr = arr.rollout, cfg.algorithm, cfg.trainer
    mode = f"{_P}.trainer_mode=colocate_async"
    if ca.num_warmup_batches < 0:
        raise ConfigError(f"{_P}.colocate_async.num_warmup_batches: must be >= 0, got {ca.num_warmup_batches}")
    if not arr.hybrid_engine:
        raise ConfigError(
            f"actor_rollout_ref.hybrid_engine: {mode} generates in the actor's workers (one pool); "
            "set it true, or use trainer_mode=separate_async for a rollout on its own pool"
        )
    if rollout.name != "hf":
        raise not_supported(
            "actor_rollout_ref.rollout.name",
            f"{rollout.name} with {mode} is not built (the long-tail "
            "cut interrupts the in-process hf engine); use rollout.name=hf",
        )
    agent_loops = (
        rollout.multi_turn.enable or rollout.agent.default_agent_loop != "single_turn_agent" or rollout.mode == "async"
    )
    if agent_loops and (tr.backend == "ray" or tr.nnodes * tr.n_gpus_per_node != 1):
        raise not_supported(
            "trainer.backend",
            f"agent loops with {mode} on Ray or more than one worker are not built "
            "(their long tail is paused in the in-process engine); use one worker with trainer.backend=local",
        )
    if rollout.over_sample_rate > 0:
        raise not_supported(
            "actor_rollout_ref.rollout.over_sample_rate",
            f"aborting the slowest trajectories with "
            f"{mode} is not built (the long-tail cut carries them to the next step); leave it 0",
        )
    if cfg.trainer.v1.sampler.sync_refill_failed_groups:
        raise not_supported(
            f"{_P}.sampler.sync_refill_failed_groups", "it applies to verl's sync sampling only; leave it false"
        )
    if cfg.data.gen_batch_size not in (None, cfg.data.train_batch_size):
        raise not_supported(
            "data.gen_batch_size",
            f"a generation batch other than data.train_batch_size with {mode} is not built; leave it unset",
        )
    if algo.filter_groups.enable:
        raise not_supported(
            "algorithm.filter_groups.enable", f"DAPO group filtering with {mode} is not built; use trainer_mode=sync"
        )
    if algo.adv_estimator == "remax":
        raise not_supported(
            "algorithm.adv_estimator",
            f"remax (a greedy baseline per prompt) with {mode} is not built; use grpo, rloo or gae",
        )
