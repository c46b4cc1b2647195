"""verl's older asynchronous entry points, translated onto ``trainer.v1.*`` (one machinery).

* ``python -m verl.experimental.one_step_off_policy.main_ppo``: the rollout on its own pool runs
  one batch ahead (generation of step k+1 overlaps training of step k). Translated to
  ``separate_async`` with one warm-up batch, one weight sync per step
  (``parameter_sync_step = data.train_batch_size / actor.ppo_mini_batch_size``), spans of at
  most 2 versions, ``wait`` (nothing dropped), and verl's defaults of that recipe
  (``algorithm.rollout_correction.bypass_mode=true``). Its top-level ``rollout.{nnodes,
  n_gpus_per_node}`` size the rollout pool (``actor_rollout_ref.rollout.*``).
* ``python -m verl.experimental.fully_async_policy.fully_async_main`` with ``async_training.*``:

  ================================================  ==============================================
  verl key                                          here
  ================================================  ==============================================
  ``async_training.trigger_parameter_sync_step`` t  ``parameter_sync_step = t x require_batches``
  ``async_training.require_batches`` r              (mini-batches per sync; one RL step = one sync)
  ``async_training.staleness_threshold`` s          ``num_warmup_batches = ceil(s)``, spans of at
                                                    most ``ceil(s) + 1`` versions (``wait``): the
                                                    rollout runs whole batches ahead, not a
                                                    fraction of one
  ``async_training.partial_rollout``                what the run does (`check_partial_rollout`):
                                                    true with the in-process ``hf`` engine, false
                                                    on Ray or vLLM; the other value is refused
  ``async_training.use_trainer_do_validate``,       only their defaults (false)
  ``use_dynamic_resource_scheduling``
  ``async_training.dynamic_schedule_*``,            inert without dynamic scheduling
  ``concurrent_samples_per_replica``
  ``rollout.{nnodes,n_gpus_per_node,n}``            ``actor_rollout_ref.rollout.*``
  ``rollout.total_rollout_steps`` (prompts)         ``trainer.total_training_steps`` = it /
                                                    ``data.train_batch_size``
  ================================================  ==============================================

  ``data.train_batch_size`` becomes ``parameter_sync_step x ppo_mini_batch_size``. Any other
  ``async_training`` key is a one-line error naming the V1 key to use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from verl.config.errors import ConfigError, not_supported

__all__ = ["check_partial_rollout", "translate_fully_async", "translate_one_step_off", "wants_partial_rollout"]

_ROLLOUT_POOL = {
    "rollout.nnodes": "actor_rollout_ref.rollout.nnodes",
    "rollout.n_gpus_per_node": "actor_rollout_ref.rollout.n_gpus_per_node",
    "rollout.n": "actor_rollout_ref.rollout.n",
}
_FULLY_ASYNC_DEFAULTS = {
    "staleness_threshold": "0.1",
    "trigger_parameter_sync_step": "4",
    "require_batches": "1",
    "partial_rollout": "True",
}
_ONLY_DEFAULT = {"use_trainer_do_validate": "false", "use_dynamic_resource_scheduling": "false"}
_INERT = (
    "dynamic_schedule_policy",
    "dynamic_schedule_deactivate_ratio",
    "dynamic_schedule_enable_rebalance",
    "concurrent_samples_per_replica",
)


def _split(arg: str) -> tuple[str, str] | None:
    if "=" not in arg or arg.startswith("-"):
        return None
    key, value = arg.split("=", 1)
    return key.lstrip("+"), value


def _sizes(overrides: Sequence[str]) -> tuple[int, int]:
    """``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` the overrides give (schema defaults else)."""
    from verl.config.schema import RootConfig

    root = RootConfig()
    batch, mini = root.data.train_batch_size, root.actor_rollout_ref.actor.ppo_mini_batch_size
    for arg in overrides:
        kv = _split(arg)
        if kv and kv[0] == "data.train_batch_size":
            batch = int(kv[1])
        elif kv and kv[0] == "actor_rollout_ref.actor.ppo_mini_batch_size":
            mini = int(kv[1])
    return batch, mini


def _map_rollout_pool(args: Sequence[str]) -> list[str]:
    out = []
    for arg in args:
        kv = _split(arg)
        out.append(f"{_ROLLOUT_POOL[kv[0]]}={kv[1]}" if kv and kv[0] in _ROLLOUT_POOL else arg)
    return out


def translate_one_step_off(args: Sequence[str]) -> list[str]:
    """Command-line arguments of verl's one-step off-policy recipe as ``trainer.v1`` overrides."""
    mapped = _map_rollout_pool(args)
    batch, mini = _sizes(mapped)
    if batch % mini:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size: {mini} does not divide data.train_batch_size={batch}"
        )
    defaults = [
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.num_warmup_batches=1",
        f"trainer.v1.separate_async.parameter_sync_step={batch // mini}",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        "trainer.v1.sampler.max_off_policy_strategy=wait",
        "algorithm.rollout_correction.bypass_mode=True",
    ]
    return [*defaults, *mapped]  # the user's own overrides come last and win


def translate_fully_async(args: Sequence[str]) -> list[str]:
    """Command-line arguments of verl's fully async recipe (``async_training.*``) as ``trainer.v1`` overrides.

    Raises:
        ConfigError: a key or value without a V1 equivalent (one line, naming the key to use).
    """
    settings = dict(_FULLY_ASYNC_DEFAULTS)
    rest, total_prompts = [], None
    for arg in _map_rollout_pool(args):
        kv = _split(arg)
        if kv is None or not (kv[0].startswith("async_training.") or kv[0] == "rollout.total_rollout_steps"):
            rest.append(arg)
            continue
        key, value = kv
        if key == "rollout.total_rollout_steps":
            total_prompts = int(value)
            continue
        name = key.split(".", 1)[1]
        if name in _ONLY_DEFAULT:
            if value.lower() != _ONLY_DEFAULT[name]:
                raise not_supported(
                    key,
                    "the trainer pool does not generate here; leave it false "
                    "(trainer.v1.separate_async.hybrid_rollout.enable_switch is verl's V1 key)",
                )
        elif name not in _INERT and name not in settings:
            raise ConfigError(
                f"unknown key '{key}': verl's fully async keys map to trainer.v1.separate_async."
                "{parameter_sync_step,num_warmup_batches} and trainer.v1.sampler.*"
            )
        settings[name] = value
    partial = settings["partial_rollout"].lower()
    if partial not in ("true", "false"):
        raise ConfigError(f"async_training.partial_rollout: must be true or false, got {settings['partial_rollout']!r}")
    staleness = float(settings["staleness_threshold"])
    if staleness < 0:
        raise ConfigError(f"async_training.staleness_threshold: must be >= 0, got {staleness}")
    sync = int(settings["trigger_parameter_sync_step"]) * int(settings["require_batches"])
    _, mini = _sizes(rest)
    ahead = math.ceil(staleness)
    out = [
        "trainer.v1.trainer_mode=separate_async",
        f"trainer.v1.separate_async.parameter_sync_step={sync}",
        f"trainer.v1.separate_async.num_warmup_batches={ahead}",
        f"trainer.v1.sampler.max_off_policy_threshold={ahead + 1}",
        "trainer.v1.sampler.max_off_policy_strategy=wait",
        "algorithm.rollout_correction.bypass_mode=True",
        f"data.train_batch_size={sync * mini}",
    ]
    if total_prompts is not None:
        out.append(f"trainer.total_training_steps={max(1, total_prompts // (sync * mini))}")
    return [*out, *rest]


PARTIAL_MARK = "async_training.partial_rollout"


def wants_partial_rollout(args: Sequence[str]) -> bool:
    """``async_training.partial_rollout`` of verl's fully async arguments (verl's default: true)."""
    value = _FULLY_ASYNC_DEFAULTS["partial_rollout"]
    for arg in args:
        kv = _split(arg)
        if kv and kv[0] == PARTIAL_MARK:
            value = kv[1]
    return value.lower() == "true"


def check_partial_rollout(wanted: bool, cfg: Any) -> None:
    """Refuse an ``async_training.partial_rollout`` the run cannot do (one line, naming what to set).

    Partial rollouts (a weight sync during a generation, each trajectory resumed under the new
    weights) need the in-process ``hf`` engine (`verl.trainer.async_rl.loop.partial_rollouts`).
    """
    from verl.trainer.async_rl.loop import partial_rollouts

    able = partial_rollouts(cfg)
    if wanted and not able:
        raise not_supported(
            "async_training.partial_rollout",
            "a sync waits for the generation in flight on Ray and "
            "with vLLM; set async_training.partial_rollout=False (or run the hf engine in process)",
        )
    if not wanted and able:
        raise not_supported(
            "async_training.partial_rollout",
            "trainer.v1.trainer_mode=separate_async resumes in-flight "
            "trajectories under new weights with the in-process hf engine; set async_training.partial_rollout=True",
        )
