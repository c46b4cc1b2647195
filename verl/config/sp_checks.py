"""Load-time checks of Ulysses sequence parallelism (``*.ulysses_sequence_parallel_size``).

A role's ``world = trainer.nnodes x trainer.n_gpus_per_node`` ranks form ``dp = world / sp``
data-parallel groups of ``sp`` ranks that split each packed sequence (`verl.modules.ulysses`).
The checks here need no model: ``sp`` divides the world, the role's forwards are packed
(``use_remove_padding``, as verl requires), the reference policy (it lives in the actor's workers)
runs split like the actor or with whole sequences, and a forward that only exists padded is
refused. The mini-batch rules of `verl.config.consistency` divide by ``dp``
(`data_parallel_size`). Heads not divisible by ``sp`` are refused by the pre-flight's model check
(it reads config.json before any worker starts) and again when a worker builds the model
(`verl.modules.ulysses.check_heads`).
"""

from __future__ import annotations

from verl.config.errors import ConfigError, not_supported
from verl.config.finalize import world_size
from verl.config.schema import RootConfig

__all__ = ["check_sequence_parallel", "data_parallel_size"]

_ACTOR = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


def data_parallel_size(cfg: RootConfig, role: str) -> int:
    """``world / (sp · tp)`` of ``role`` (``actor`` or ``critic``; ``tp``: its
    ``fsdp_config.tensor_parallel_size``); the world when the check has not run yet."""
    from verl.config.tp_checks import tensor_parallel_size

    sp = (cfg.actor_rollout_ref.actor if role == "actor" else cfg.critic).ulysses_sequence_parallel_size
    sp *= tensor_parallel_size(cfg, role)
    world = world_size(cfg)
    return world // sp if sp >= 1 and world % sp == 0 else world


def _check_role(key: str, sp: int, world: int, packed: bool, padding_key: str) -> None:
    if sp < 1:
        raise ConfigError(f"{key}: must be >= 1, got {sp}")
    if sp == 1:
        return
    if world % sp:
        raise ConfigError(f"{key}={sp} must divide the world size {world} (trainer.nnodes x trainer.n_gpus_per_node)")
    if not packed:
        raise ConfigError(
            f"{key}={sp} needs {padding_key}=true: sequence parallelism splits packed (padding-free) sequences"
        )


def check_sequence_parallel(cfg: RootConfig) -> None:
    """The SP settings of the actor, reference and critic (see the module docstring).

    Raises:
        ConfigError: one line naming the key and the numbers.
    """
    world, arr = world_size(cfg), cfg.actor_rollout_ref
    actor_sp = arr.actor.ulysses_sequence_parallel_size
    _check_role(
        _ACTOR, actor_sp, world, bool(arr.model.use_remove_padding), "actor_rollout_ref.model.use_remove_padding"
    )
    if cfg.critic.enable:
        _check_role(
            "critic.ulysses_sequence_parallel_size",
            cfg.critic.ulysses_sequence_parallel_size,
            world,
            bool(cfg.critic.model.use_remove_padding),
            "critic.model.use_remove_padding",
        )
    ref_sp = arr.ref.ulysses_sequence_parallel_size
    if ref_sp not in (1, actor_sp):
        raise ConfigError(
            f"actor_rollout_ref.ref.ulysses_sequence_parallel_size={ref_sp}: the reference policy runs "
            f"in the actor's workers; use the actor's {actor_sp} (split) or 1 (whole sequences)"
        )
    if actor_sp > 1 and arr.actor.calculate_sum_pi_squared:
        raise not_supported(
            "actor_rollout_ref.actor.calculate_sum_pi_squared", f"its forward is padded; use it with {_ACTOR}=1"
        )
