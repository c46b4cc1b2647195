"""The rules of the :data:`verl.config.compat.verl_keys.CONDITIONAL` keys, and verl's key aliases.

``translate_aliases`` runs in ``finalize`` (it rewrites verl's alternative spellings onto the
keys the product reads); ``check_conditional`` runs after it and refuses the settings that
cannot take effect, each with the one-line "`<key>` is not supported yet: ..." error.
"""

from __future__ import annotations

from typing import Any

from verl.config.errors import ConfigError

__all__ = ["check_conditional", "translate_aliases"]

_ALWAYS_SAVED = frozenset({"model", "optimizer", "extra"})


def _fsdp_sections(cfg: Any) -> list[tuple[str, Any]]:
    arr = cfg.actor_rollout_ref
    return [
        ("actor_rollout_ref.actor.fsdp_config", arr.actor.fsdp_config),
        ("actor_rollout_ref.ref.fsdp_config", arr.ref.fsdp_config),
        ("critic.model.fsdp_config", cfg.critic.model.fsdp_config),
        ("reward_model.model.fsdp_config", cfg.reward_model.model.fsdp_config),
    ]


def _optim_sections(cfg: Any) -> list[tuple[str, Any, Any]]:
    """(prefix, optim section, the role section holding grad_clip)."""
    return [
        ("actor_rollout_ref.actor", cfg.actor_rollout_ref.actor.optim, cfg.actor_rollout_ref.actor),
        ("critic", cfg.critic.optim, cfg.critic),
    ]


def _alias(prefix: str, new: str, old: str, new_value: Any, old_value: Any, default: Any) -> Any:
    """The value two spellings agree on; refuses two different non-default values."""
    if new_value != default and old_value != default and new_value != old_value:
        raise ConfigError(f"{prefix}.{new}={new_value!r} and {prefix}.{old}={old_value!r} disagree; set only {new}")
    return new_value if new_value != default else old_value


def translate_aliases(cfg: Any) -> None:
    """Rewrites verl's alternative spellings in place (idempotent).

    - ``optim.lr_scheduler_type`` and its deprecated alias ``optim.warmup_style``: both end up
      holding the chosen schedule (``constant`` is the default of both).
    - ``optim.clip_grad`` (verl's new engine) and the role's ``grad_clip``: the non-default one.
    - ``fsdp_config.offload_policy`` (FSDP2 CPUOffloadPolicy) turns on ``param_offload`` and
      ``optimizer_offload`` (what that policy offloads).
    - ``checkpoint.save_contents`` with ``hf_model`` turns on ``trainer.save_hf``.
    - ``critic.forward_micro_batch_size`` (deprecated global size) -> ``..._per_gpu``.

    Raises:
        ConfigError: Two spellings set to different non-default values.
    """
    for prefix, optim, role in _optim_sections(cfg):
        style = _alias(
            f"{prefix}.optim",
            "lr_scheduler_type",
            "warmup_style",
            optim.lr_scheduler_type,
            optim.warmup_style,
            "constant",
        )
        optim.lr_scheduler_type = optim.warmup_style = style
        clip = _alias(prefix, "optim.clip_grad", "grad_clip", optim.clip_grad, role.grad_clip, 1.0)
        optim.clip_grad = role.grad_clip = clip
    for _, fsdp in _fsdp_sections(cfg):
        if fsdp.offload_policy:
            fsdp.param_offload = fsdp.optimizer_offload = True
    for ckpt in (cfg.actor_rollout_ref.actor.checkpoint, cfg.critic.checkpoint):
        if "hf_model" in ckpt.save_contents:
            cfg.trainer.save_hf = True
    c = cfg.critic
    if c.forward_micro_batch_size is not None and c.forward_micro_batch_size_per_gpu is None:
        world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
        if c.forward_micro_batch_size % world:
            raise ConfigError(
                f"critic.forward_micro_batch_size: {c.forward_micro_batch_size} is not divisible by "
                f"the world size {world}; set critic.forward_micro_batch_size_per_gpu instead"
            )
        c.forward_micro_batch_size_per_gpu = c.forward_micro_batch_size // world
        c.forward_micro_batch_size = None


def _refuse(path: str, what: str) -> ConfigError:
    from verl.config.errors import not_supported

    return not_supported(path, what)


def _check_fsdp(cfg: Any) -> None:
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    for prefix, fsdp in _fsdp_sections(cfg):
        if fsdp.fsdp_size not in (-1, world):
            raise _refuse(
                f"{prefix}.fsdp_size", f"hybrid sharding (HSDP) is not implemented; use -1 or the world size {world}"
            )
        offload = fsdp.param_offload or fsdp.optimizer_offload
        # one worker on a GPU keeps the whole model there: offload would need its own engine path
        if offload and world == 1 and cfg.trainer.device == "cuda":
            key = "param_offload" if fsdp.param_offload else "optimizer_offload"
            raise _refuse(
                f"{prefix}.{key}",
                "CPU offload needs FSDP2 with >1 worker; set trainer.n_gpus_per_node >= 2 or leave it false",
            )


def _check_mirrors(cfg: Any) -> None:
    arr = cfg.actor_rollout_ref
    n = arr.rollout.n
    for prefix, section in (
        ("actor_rollout_ref.actor", arr.actor),
        ("actor_rollout_ref.ref", arr.ref),
        ("critic", cfg.critic),
    ):
        if section.rollout_n is not None and section.rollout_n != n:
            raise _refuse(f"{prefix}.rollout_n", f"it mirrors actor_rollout_ref.rollout.n={n}; set rollout.n instead")
    if arr.ref.strategy is not None and arr.ref.strategy != arr.actor.strategy:
        raise _refuse("actor_rollout_ref.ref.strategy", f"the reference model uses actor.strategy={arr.actor.strategy}")
    model_rmpad = arr.model.use_remove_padding
    if arr.actor.use_remove_padding is not None and arr.actor.use_remove_padding != model_rmpad:
        raise ConfigError(
            "actor_rollout_ref.actor.use_remove_padding: mirrors actor_rollout_ref.model.use_remove_padding; "
            "set that key"
        )


def _check_checkpoint(cfg: Any) -> None:
    for prefix, ckpt in (
        ("actor_rollout_ref.actor.checkpoint", cfg.actor_rollout_ref.actor.checkpoint),
        ("critic.checkpoint", cfg.critic.checkpoint),
    ):
        for key in ("save_contents", "load_contents"):
            missing = _ALWAYS_SAVED - set(getattr(ckpt, key))
            if missing:
                raise _refuse(
                    f"{prefix}.{key}",
                    f"model, optimizer and extra are always saved and restored together; add {sorted(missing)}",
                )


def _check_dynamic_sampling(cfg: Any) -> None:
    fg, data, algo = cfg.algorithm.filter_groups, cfg.data, cfg.algorithm
    async_fetch = cfg.trainer.v1.trainer_mode == "separate_async"  # verl's fetch granularity (v1_checks)
    if (
        data.gen_batch_size is not None
        and data.gen_batch_size != data.train_batch_size
        and not fg.enable
        and not async_fetch
    ):
        raise _refuse(
            "data.gen_batch_size",
            "a generation batch other than data.train_batch_size is used only by "
            "DAPO dynamic sampling; set algorithm.filter_groups.enable=true or remove the key",
        )
    if not fg.enable:
        return
    if algo.adv_estimator == "remax":
        raise _refuse(
            "algorithm.filter_groups.enable", "with adv_estimator=remax (its greedy baselines are per generation batch)"
        )
    if (fg.metric or "seq_final_reward") == "seq_final_reward" and algo.use_kl_in_reward:
        raise _refuse(
            "algorithm.filter_groups.metric",
            "seq_final_reward with use_kl_in_reward (groups are filtered before the KL penalty); use seq_reward or acc",
        )
    if fg.max_num_gen_batches < 0:
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches: must be >= 0 (0 = no limit), got {fg.max_num_gen_batches}"
        )


def _check_checkpoint_engine(r: Any) -> None:
    """``rollout.checkpoint_engine``: how weights reach the engine, colocated or on its own pool.

    Only verl's ``naive`` backend exists here (colocated: in the worker's process; separate
    pool: buckets through the controller, Ray's object store on Ray), and it takes no options.
    The bucket size takes effect wherever buckets exist (vLLM colocated, ``hybrid_engine=false``);
    the colocated ``hf`` engine has none to size (see the key's entry in ``verl_keys.CONDITIONAL``).
    """
    ce, key = r.checkpoint_engine, "actor_rollout_ref.rollout.checkpoint_engine"
    if ce.backend != "naive":
        raise _refuse(
            f"{key}.backend",
            f"{ce.backend!r}: weights reach the rollout in process or, with hybrid_engine=false, "
            "as buckets through the controller (Ray's object store on Ray); set it to naive",
        )
    if ce.update_weights_bucket_megabytes <= 0:
        raise ConfigError(
            f"{key}.update_weights_bucket_megabytes: must be > 0, got {ce.update_weights_bucket_megabytes}"
        )
    if any(v not in (None, {}) for v in ce.engine_kwargs.values()):
        raise _refuse(
            f"{key}.engine_kwargs",
            f"{sorted(ce.engine_kwargs)}: options of verl's other checkpoint-engine "
            "backends; the naive backend takes none, remove them",
        )


def _check_split_rollout(cfg: Any) -> None:
    """``hybrid_engine=false``: the rollout's own pool (`verl.trainer.ppo.split_rollout`)."""
    arr, t = cfg.actor_rollout_ref, cfg.trainer
    r = arr.rollout
    for key in ("nnodes", "n_gpus_per_node"):
        value = getattr(r, key)
        if value < 0:
            raise ConfigError(f"actor_rollout_ref.rollout.{key}: must be >= 0 (0 = the trainer's), got {value}")
        # verl's default mirrors trainer.<key>: the colocated rollout then uses the actor's workers
        if value and arr.hybrid_engine and value != getattr(t, key):
            raise _refuse(
                f"actor_rollout_ref.rollout.{key}",
                "it sizes the rollout's own resource pool; set "
                "actor_rollout_ref.hybrid_engine=false, or leave it 0 or trainer's value (the colocated "
                "rollout uses the actor's workers)",
            )
    if arr.hybrid_engine:
        return
    size = (r.nnodes or t.nnodes) * (r.n_gpus_per_node or t.n_gpus_per_node)
    local = t.backend == "local" or (t.backend == "auto" and t.nnodes * t.n_gpus_per_node == 1)
    if local and size != 1:
        raise ConfigError(
            f"actor_rollout_ref.hybrid_engine=false: a rollout pool of {size} workers needs the Ray backend "
            f"(trainer.backend=ray); the local backend runs one rollout worker"
        )


def check_conditional(cfg: Any) -> None:
    """Refuses the :data:`~verl.config.compat.verl_keys.CONDITIONAL` settings that cannot take effect.

    Raises:
        ConfigError: "`<key>` is not supported yet: <what to do>".
    """
    arr = cfg.actor_rollout_ref
    _check_checkpoint_engine(arr.rollout)
    _check_split_rollout(cfg)
    if arr.rollout.name == "hf" and arr.rollout.logprobs_mode != "processed_logprobs":
        raise _refuse(
            "actor_rollout_ref.rollout.logprobs_mode",
            "the hf engine returns log-probs after temperature (processed_logprobs)",
        )
    new, old = cfg.reward_manager.name, cfg.reward_model.reward_manager
    if new != "naive" and old != "naive" and new != old:
        raise ConfigError(f"reward_manager.name={new!r} and reward_model.reward_manager={old!r} disagree; set only one")
    if cfg.reward_manager.source not in ("register", "importlib"):
        raise ConfigError(f"reward_manager.source: must be register or importlib, got {cfg.reward_manager.source!r}")
    if cfg.reward_manager.source == "importlib" and not cfg.reward_manager.module.path:
        raise ConfigError("reward_manager.module.path: must be set when reward_manager.source=importlib")
    _check_global_profiler(cfg)
    _check_fsdp(cfg)
    _check_dynamic_sampling(cfg)
    _check_mirrors(cfg)
    _check_checkpoint(cfg)


def _check_global_profiler(cfg: Any) -> None:
    """verl's ``global_profiler``: only the case that does nothing in verl on a CPU run is accepted.

    With ``tool=torch_memory`` and no ``steps`` verl profiles no step; it only arms a CUDA
    allocator out-of-memory snapshot, which has nothing to observe with ``trainer.device=cpu``
    (verl's own multi-turn recipes set exactly this). Everything else would record something in
    verl and is refused rather than silently dropped.
    """
    gp = cfg.global_profiler
    if gp.tool is None:
        return
    if gp.tool == "torch_memory" and not gp.steps and cfg.trainer.device == "cpu":
        import logging

        logging.getLogger(__name__).warning(
            "global_profiler.tool=torch_memory without steps only arms a CUDA OOM snapshot; nothing to record on CPU"
        )
        return
    raise _refuse(
        "global_profiler.tool",
        "profile with py-spy (installed) or torch.profiler around `verl train`; "
        "only torch_memory without steps on a CPU run (a no-op, as in verl) is accepted",
    )
