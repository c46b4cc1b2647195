"""Load-time checks of tensor parallelism (``*.fsdp_config.tensor_parallel_size``, verl's
torchtitan-engine key name under the role's engine section).

A role's ``world = trainer.nnodes x trainer.n_gpus_per_node`` ranks form ``dp = world / tp``
data-parallel groups of ``tp`` ranks that each hold a column / row slice of every decoder block
(`verl.workers.sharding.tensor_parallel`). Checked here without the model: ``tp`` divides the
world (with Ulysses SP at ``sp``: ``sp · tp`` divides it and ``dp = world / (sp · tp)``), and the
reference policy's degree is 1 (frozen, FSDP2 over the whole world) or the actor's (the actor's
layout, `verl.workers.fsdp_workers.build_reference_engine`). The actor's LoRA adapters follow the TP
plan (`verl.workers.sharding.tp_lora`); the critic's are refused. Heads not divisible by ``tp`` (or
``heads / tp`` by ``sp``) and an architecture without a plan are refused by the pre-flight's model
check and when a worker builds the model (`verl.workers.sharding.tensor_parallel.check_tp_sp_heads`).
"""

from __future__ import annotations

from verl.config.errors import ConfigError, not_supported
from verl.config.finalize import rollout_world_size, world_size
from verl.config.schema import RootConfig

__all__ = ["check_tensor_parallel", "tensor_parallel_size"]

_ACTOR = "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size"
_CRITIC = "critic.model.fsdp_config.tensor_parallel_size"


def tensor_parallel_size(cfg: RootConfig, role: str) -> int:
    """The TP degree of ``role`` (``actor`` or ``critic``)."""
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config if role == "actor" else cfg.critic.model.fsdp_config
    return fsdp.tensor_parallel_size


def _check_role(key: str, tp: int, sp: int, world: int, lora: bool) -> None:
    if tp < 1:
        raise ConfigError(f"{key}: must be >= 1, got {tp}")
    if tp == 1:
        return
    if world % tp:
        raise ConfigError(f"{key}={tp} must divide the world size {world} (trainer.nnodes x trainer.n_gpus_per_node)")
    if world % (tp * sp):
        raise ConfigError(
            f"{key}={tp} x ulysses_sequence_parallel_size={sp} = {tp * sp} must divide the world size "
            f"{world} (trainer.nnodes x trainer.n_gpus_per_node)"
        )
    if lora:
        raise not_supported(key, "with LoRA on the critic (critic.model.lora_rank > 0); use tensor_parallel_size=1")


def check_tensor_parallel(cfg: RootConfig) -> None:
    """The TP settings of the actor, reference and critic (see the module docstring).

    Raises:
        ConfigError: one line naming the key and the numbers.
    """
    world, arr = world_size(cfg), cfg.actor_rollout_ref
    # the actor's LoRA adapters follow the TP plan (verl.workers.sharding.tp_lora); the critic's are untested: refused
    _check_role(
        _ACTOR, arr.actor.fsdp_config.tensor_parallel_size, arr.actor.ulysses_sequence_parallel_size, world, False
    )
    if cfg.critic.enable:
        _check_role(
            _CRITIC,
            cfg.critic.model.fsdp_config.tensor_parallel_size,
            cfg.critic.ulysses_sequence_parallel_size,
            world,
            getattr(cfg.critic.model, "lora_rank", 0) > 0,
        )
    _check_rollout(cfg, world)
    ref_tp, actor_tp = arr.ref.fsdp_config.tensor_parallel_size, arr.actor.fsdp_config.tensor_parallel_size
    if ref_tp not in (1, actor_tp):  # the reference is laid out like the actor or not split at all
        raise not_supported(
            "actor_rollout_ref.ref.fsdp_config.tensor_parallel_size",
            f"={ref_tp} with the actor's tensor_parallel_size={actor_tp}: the reference uses the actor's "
            f"layout; set it to 1 or {actor_tp}",
        )


def _check_rollout(cfg: RootConfig, world: int) -> None:
    """The hf engine's ``rollout.tensor_model_parallel_size`` (vLLM checks its own, vllm_config.py): it
    divides the actor's world (hybrid engine) or the rollout pool's (``hybrid_engine=false``)."""
    arr = cfg.actor_rollout_ref
    tp, key = arr.rollout.tensor_model_parallel_size, "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if arr.rollout.name != "hf" or tp == 1:
        return
    if arr.hybrid_engine:
        if world % tp:
            raise ConfigError(
                f"{key}={tp} must divide the world size {world} (trainer.nnodes x trainer.n_gpus_per_node)"
            )
        return
    # the rollout's own pool (Ray); in process (the local backend) it is one worker
    ray = cfg.trainer.backend == "ray" or (cfg.trainer.backend == "auto" and world > 1)
    pool = rollout_world_size(cfg) if ray else 1
    if pool % tp:
        raise ConfigError(
            f"{key}={tp} must divide the rollout pool's world size {pool} (hybrid_engine=false: "
            "rollout.nnodes x rollout.n_gpus_per_node on Ray, 1 in process)"
        )
