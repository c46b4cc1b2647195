"""Assemble what `RLTrainer` drives: tokenizer, data, rewards, worker groups, loggers, checkpoints.

Placement and backend are decided here and only here (the loop never knows where it runs): world size =
``trainer.nnodes * trainer.n_gpus_per_node``; ``trainer.backend=auto`` means ``local`` (the
workers live in the driver process) for world size 1 and ``ray`` otherwise. On Ray the actor,
rollout and reference share one resource pool (hybrid engine) unless
``actor_rollout_ref.hybrid_engine=false`` gives the rollout its own (`build_split_rollout`); the
critic and the reward model join the actor's pool (``placement=colocated``, default) or get a pool
of their own (``separate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from verl.config.finalize import world_size
from verl.run.checkpoint import CheckpointManager
from verl.trainer.ppo.distillation import build_teacher
from verl.trainer.ppo.state import TrainerParts
from verl.run.checkpoint import seed_everything

if TYPE_CHECKING:
    from verl.config.schema import RootConfig


def resolve_root(config: Any, model_config: Any = None) -> RootConfig:
    """The root config behind ``config`` (a `RootConfig` or a section from `load_config`).

    ``model_config``, when given, replaces ``actor_rollout_ref.model`` (seed API).

    Raises:
        TypeError: ``config`` is a section that was not produced by `load_config`.
    """
    from verl.config.schema import RootConfig

    root = config if isinstance(config, RootConfig) else getattr(config, "_root", None)
    if root is None:
        raise TypeError("RLTrainer(config=...) takes the root config from load_config() or one of its sections")
    if model_config is not None:
        root.actor_rollout_ref.model = model_config
    return root


def backend_of(cfg: RootConfig) -> str:
    """``local`` or ``ray`` after resolving ``trainer.backend=auto``."""
    backend = cfg.trainer.backend
    if backend == "auto":
        backend = "local" if world_size(cfg) == 1 else "ray"
    if backend == "local" and world_size(cfg) != 1:
        raise ValueError(f"trainer.backend=local runs one worker; world size is {world_size(cfg)}")
    return backend


def build_resource_pool(cfg: RootConfig) -> Any:
    """The Ray resource pool shared by colocated roles (None on the local backend)."""
    if backend_of(cfg) == "local":
        return None
    from verl.single_controller.ray import RayResourcePool

    init = {k: v for k, v in cfg.ray_kwargs.ray_init.items() if v is not None}
    if init:  # verl's ray_kwargs.ray_init: the user's ray.init arguments win (Ray starts once)
        from verl.single_controller.ray import ensure_ray

        ensure_ray(**init)
    return RayResourcePool(world_size(cfg), cfg.trainer.device, nnodes=cfg.trainer.nnodes)


def build_worker_group(cfg: RootConfig, pool: Any, role: str, worker_cls: type, *args: Any, **kwargs: Any) -> Any:
    """A worker group of ``worker_cls`` on the configured backend (``pool``: see `build_resource_pool`).

    On Ray the group has one rank per bundle of ``pool``.
    """
    if pool is None:
        from verl.single_controller.local import LocalWorkerGroup
        from verl.single_controller.watchdog import CallDeadlines

        group = LocalWorkerGroup(worker_cls, *args, **kwargs)
        group.role = role
        if cfg.trainer.hang_timeout_s is not None:  # off by default in-process (see the key's comment)
            group.deadlines = CallDeadlines(cfg.trainer.hang_timeout_s)
        return group
    from verl.single_controller.ray import RayWorkerGroup

    return RayWorkerGroup(worker_cls, pool.world_size, cfg.trainer, *args, role=role, resource_pool=pool, **kwargs)


def check_free_gpus(needed: int, free: float) -> None:
    """The rollout's own pool needs ``needed`` GPUs that the actor's pool has not reserved.

    Raises:
        ConfigError: fewer than ``needed`` GPUs are free in the Ray cluster.
    """
    if free < needed:
        from verl.config import ConfigError

        raise ConfigError(
            f"actor_rollout_ref.hybrid_engine=false: the rollout's own pool needs {needed} GPU(s) besides the "
            f"actor's, but {free:g} are free; lower actor_rollout_ref.rollout.n_gpus_per_node or set hybrid_engine=true"
        )


def build_split_rollout(cfg: RootConfig, actor_wg: Any) -> tuple[Any, Any]:
    """``hybrid_engine=false``: the rollout group and the actor behind one `SplitActorRollout`.

    On Ray the rollout gets its own `RayResourcePool` of `rollout_world_size` bundles (its own
    devices); on the local backend it is a second in-process worker with its own weights.

    Returns:
        (the combined actor-rollout group, the rollout's pool or None).
    """
    from verl.config.finalize import rollout_world_size
    from verl.trainer.ppo.split_rollout import SplitActorRollout
    from verl.workers.rollout_worker import RolloutWorker

    pool = None
    if backend_of(cfg) == "ray":
        import ray

        from verl.single_controller.ray import RayResourcePool

        size = rollout_world_size(cfg)
        if cfg.trainer.device == "cuda":  # else the placement group waits for devices that never come
            check_free_gpus(size, ray.available_resources().get("GPU", 0.0))
        nnodes = cfg.actor_rollout_ref.rollout.nnodes or cfg.trainer.nnodes
        pool = RayResourcePool(size, cfg.trainer.device, nnodes=nnodes)
    rollout_wg = build_worker_group(
        cfg, pool, "rollout", RolloutWorker, cfg.actor_rollout_ref, seed=cfg.trainer.seed, device=cfg.trainer.device
    )
    rollout_wg.init_model()
    return SplitActorRollout(actor_wg, rollout_wg, sync_check=cfg.actor_rollout_ref.rollout.sync_check), pool


def build_reward_fns(cfg: RootConfig, tokenizer: Any) -> tuple[Any, Any]:
    """Training and validation reward managers (see `verl.trainer.ppo.reward`)."""
    from verl.trainer.ppo.reward import build_reward_fns as build

    return build(cfg, tokenizer)


def data_tool_schemas(data: Any) -> list[dict[str, Any]] | None:
    """The tool schemas the RL dataset's ``filter_overlong_prompts`` renders (``data.tool_config_path``).

    None without the path or without the filter (the tools are then not built). ``builtin://NAME``
    names a shipped config, as in ``rollout.multi_turn.tool_config_path``.

    Raises:
        ToolConfigError: the tool config file is missing or invalid.
        ValueError: an unknown built-in name.
    """
    if not (data.tool_config_path and data.filter_overlong_prompts):
        return None
    from verl.tools import load_tool_schemas
    from verl.workers.rollout.agent_loop.manager import builtin_config_file

    return load_tool_schemas(
        builtin_config_file(data.tool_config_path, "tool")
    )  # builtin://NAME as the agent loop reads it


def check_device(cfg: RootConfig) -> None:
    """Refuse ``trainer.device=cuda`` where torch sees no CUDA device (a one-line `ConfigError`)."""
    if cfg.trainer.device == "cuda" and not torch.cuda.is_available():
        from verl.config import ConfigError

        raise ConfigError("trainer.device: 'cuda' but no CUDA device is available here; use trainer.device=cpu")


def build_parts(cfg: RootConfig, dataloader: Any = None) -> TrainerParts:
    """Build every part of a run from the root config (models are loaded here, after validation)."""
    from verl.config import save_config
    from verl.data import RLDataLoader
    from verl.run.model_access import load_run_tokenizer
    from verl.run.preflight import prepare_run
    from verl.run.tracking import Tracking
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker, RewardModelWorker

    check_device(cfg)
    seed_everything(cfg.trainer.seed)
    tokenizer = load_run_tokenizer(cfg)  # a missing tokenizer / model is a one-line error naming its key
    prepare_run(cfg, tokenizer)  # pre-flight checks (verl.run.preflight), before any model loads
    tools = data_tool_schemas(cfg.data)  # data.tool_config_path: overlong prompts counted with the tools rendered
    train_dl = dataloader or RLDataLoader(cfg.data, tokenizer=tokenizer, split="train", tool_schemas=tools)
    val_dl = (
        RLDataLoader(cfg.data, tokenizer=tokenizer, split="val", tool_schemas=tools) if cfg.data.val_files else None
    )
    total = cfg.trainer.total_training_steps or len(train_dl) * cfg.trainer.total_epochs
    reward_fn, val_reward_fn = build_reward_fns(cfg, tokenizer)
    use_ref = cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss
    pool = build_resource_pool(cfg)
    actor_wg = build_worker_group(
        cfg,
        pool,
        "actor_rollout_ref",
        ActorRolloutRefWorker,
        cfg.actor_rollout_ref,
        use_reference=use_ref,
        seed=cfg.trainer.seed,
        device=cfg.trainer.device,
    )
    actor_wg.init_model(total)
    critic_wg, extra_pools = None, []
    if not cfg.actor_rollout_ref.hybrid_engine:
        actor_wg, rollout_pool = build_split_rollout(cfg, actor_wg)
        extra_pools.append(rollout_pool)
    if cfg.critic.enable:
        critic_pool = pool if cfg.critic.placement == "colocated" else build_resource_pool(cfg)
        extra_pools.append(critic_pool)
        critic_wg = build_worker_group(
            cfg,
            critic_pool,
            "critic",
            CriticWorker,
            cfg.critic,
            rollout_n=cfg.actor_rollout_ref.rollout.n,
            seed=cfg.trainer.seed,
            device=cfg.trainer.device,
        )
        critic_wg.init_model(total)
    rm_wg = None
    if cfg.reward_model.enable:
        rm_pool = pool if cfg.reward_model.placement == "colocated" else build_resource_pool(cfg)
        extra_pools.append(rm_pool)
        rm_wg = build_worker_group(
            cfg, rm_pool, "reward_model", RewardModelWorker, cfg.reward_model, device=cfg.trainer.device
        )
        rm_wg.init_model()
    teacher = build_teacher(cfg, pool, build_worker_group)  # on-policy distillation (None unless distillation.enabled)
    kl_ctrl = None
    if cfg.algorithm.use_kl_in_reward:
        from verl.algorithms import get_kl_controller

        k = cfg.algorithm.kl_ctrl
        kl_ctrl = get_kl_controller(k.type, kl_coef=k.kl_coef, target_kl=k.target_kl, horizon=k.horizon)
    out_dir = Path(cfg.trainer.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out_dir / "config.yaml")
    tracker = Tracking(cfg.trainer.logger, out_dir, cfg.trainer.project_name, cfg.trainer.experiment_name)
    keeps = [k for k in (cfg.trainer.max_actor_ckpt_to_keep, cfg.trainer.max_critic_ckpt_to_keep) if k]
    return TrainerParts(
        tokenizer=tokenizer,
        train_dataloader=train_dl,
        val_dataloader=val_dl,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
        actor_rollout_wg=actor_wg,
        critic_wg=critic_wg,
        rm_wg=rm_wg,
        resource_pools=[p for p in dict.fromkeys([pool, *extra_pools]) if p is not None],
        kl_ctrl=kl_ctrl,
        tracker=tracker,
        checkpoints=CheckpointManager(cfg.trainer.default_local_dir, min(keeps) if keeps else None),
        total_training_steps=total,
        n_params=actor_wg.num_parameters(),
        world_size=world_size(cfg),
        teacher=teacher,
    )
