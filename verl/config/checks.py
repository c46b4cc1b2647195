"""Per-section value checks: ranges, allowed names, and cross-field rules inside one section.

Every schema section has its rules here, keyed by its dataclass, so a section's constraints are
read in one place, beside the section that owns the fields; checks that span sections (batch sizes, estimator vs critic,
lengths) are in :mod:`verl.config.consistency`. A section type used at several paths (e.g.
``FSDPConfig``) is checked at each of them, and messages name the full dotted key.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.config import choices as C
from verl.config import schema as S
from verl.config.checks_distill import check_distillation_section
from verl.config.schema_distill import DistillationConfig
from verl.config.errors import ConfigError, did_you_mean, not_supported
from verl.config.schema_attest import SYNC_MISMATCH_ACTIONS
from verl.config.schema_guards import check_alarms, check_sentinel

__all__ = ["Rule", "check_sections", "SECTION_RULES", "unsupported"]


@dataclass(frozen=True)
class Rule:
    """One constraint on one field of a section.

    Attributes:
        field: Field name within the section.
        ok: Predicate on the (non-None) value.
        expect: What ``ok`` requires, for the message (``"must be >= 0"``).
    """

    field: str
    ok: Callable[[Any], bool]
    expect: str
    allowed: frozenset[str] = frozenset()
    unsupported: str = ""
    # Non-empty: a failed ``ok`` is "<what> is not supported yet: <unsupported>" (what to do instead).
    what: str = ""
    # The subject of that message; empty = the dotted key in backquotes.


def ge(name: str, lo: float) -> Rule:
    """``value >= lo``."""
    return Rule(name, lambda v: v >= lo, f"must be >= {lo}")


def gt(name: str, lo: float) -> Rule:
    """``value > lo``."""
    return Rule(name, lambda v: v > lo, f"must be > {lo}")


def within(name: str, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Rule:
    """``value`` in the interval ``[lo, hi]`` (each end open when asked)."""

    def ok(v: float) -> bool:
        return (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)

    interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    return Rule(name, ok, f"must be in {interval}")


def one_of(name: str, allowed: frozenset[str]) -> Rule:
    """``value`` is one of the allowed names (the message suggests the closest)."""
    return Rule(name, lambda v: v in allowed, "must be one of " + ", ".join(sorted(allowed)), allowed)


def one_of_or_registered(name: str, allowed: frozenset[str], kind: str) -> Rule:
    """``value`` is a built-in name or one registered by user code (``C.EXTENSIONS[kind]``)."""
    return Rule(
        name,
        lambda v: v in allowed or v in C.EXTENSIONS[kind],
        "must be one of " + ", ".join(sorted(allowed)) + " or a name registered by "
        "actor_rollout_ref.model.external_lib",
        allowed,
    )


def each_of(name: str, allowed: frozenset[str]) -> Rule:
    """Every entry of a list value is one of the allowed names."""
    expect = "entries must be in " + ", ".join(sorted(allowed))
    return Rule(name, lambda v: all(x in allowed for x in v), expect, allowed)


def unsupported(name: str, ok: Callable[[Any], bool], what_to_do: str, what: str = "") -> Rule:
    """A setting that is "not supported yet" unless ``ok(value)``: the message says what to do instead."""
    return Rule(name, ok, "", unsupported=what_to_do, what=what)


def _finite(name: str) -> Rule:
    """``value`` is not inf or NaN."""
    return Rule(name, lambda v: math.isfinite(v), "must be finite")


_MICRO = ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")
_LOGPROB_MICRO = ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")

SECTION_RULES: dict[type, list[Rule]] = {
    S.DataConfig: [
        ge("max_prompt_length", 1),
        ge("max_response_length", 1),
        ge("train_batch_size", 1),
        ge("val_batch_size", 1),
        ge("dataloader_num_workers", 0),
        one_of("truncation", C.TRUNCATIONS),
        Rule("train_files", lambda v: len(v) > 0, "must name at least one file"),
    ],
    S.ModelConfig: [one_of("dtype", C.DTYPES | frozenset(C.DTYPE_ALIASES)), ge("lora_rank", 0)],
    S.CriticModelConfig: [one_of("dtype", C.DTYPES | frozenset(C.DTYPE_ALIASES)), ge("lora_rank", 0)],
    S.RewardModelModelConfig: [one_of("dtype", C.DTYPES | frozenset(C.DTYPE_ALIASES))],
    S.OptimConfig: [
        ge("lr", 0.0),
        _finite("lr"),
        within("lr_warmup_steps_ratio", 0.0, 1.0),
        within("min_lr_ratio", 0.0, 1.0),
        one_of("warmup_style", C.WARMUP_STYLES),
        one_of("lr_scheduler_type", C.WARMUP_STYLES),
        ge("weight_decay", 0.0),
        Rule("betas", lambda v: len(v) == 2 and all(0.0 <= b < 1.0 for b in v), "must be two numbers in [0, 1)"),
        gt("eps", 0.0),
    ],
    S.FSDPConfig: [
        one_of("mixed_precision", C.DTYPES | frozenset(C.DTYPE_ALIASES)),
        Rule("fsdp_size", lambda v: v == -1 or v >= 1, "must be -1 (all ranks) or >= 1"),
    ],
    S.CheckpointContentConfig: [
        each_of("save_contents", C.CHECKPOINT_CONTENTS),
        each_of("load_contents", C.CHECKPOINT_CONTENTS),
    ],
    S.PolicyLossConfig: [
        one_of_or_registered("loss_mode", C.POLICY_LOSS_MODES, "policy_loss"),
        within("clip_cov_ratio", 0.0, 1.0, lo_open=True),
        within("kl_cov_ratio", 0.0, 1.0, lo_open=True),
        ge("ppo_kl_coef", 0.0),
        gt("dro_beta", 0.0),
        _finite("dro_beta"),
    ],
    S.ActorConfig: [
        one_of("strategy", C.STRATEGIES | frozenset(C.STRATEGY_ALIASES)),
        ge("ppo_mini_batch_size", 1),
        *(ge(name, 1) for name in _MICRO),
        ge("ppo_max_token_len_per_gpu", 1),
        gt("grad_clip", 0.0),
        gt("clip_ratio", 0.0),
        ge("clip_ratio_low", 0.0),  # verl has no upper bound: >= 1 leaves the ratio unbounded below (CISPO sets 10)
        ge("clip_ratio_high", 0.0),
        gt("clip_ratio_c", 1.0),
        one_of("loss_agg_mode", C.LOSS_AGG_MODES),
        gt("loss_scale_factor", 0.0),
        ge("kl_loss_coef", 0.0),
        one_of("kl_loss_type", C.KL_ESTIMATORS),
        ge("ppo_epochs", 1),
        ge("logprob_chunk_size", 1),
        within("top_entropy_quantile", 0.0, 1.0, lo_open=True),
        gt("tau_pos", 0.0),
        gt("tau_neg", 0.0),
    ],
    S.RefConfig: [*(ge(name, 1) for name in _LOGPROB_MICRO), ge("log_prob_max_token_len_per_gpu", 1)],
    S.SamplingConfig: [
        ge("temperature", 0.0),
        Rule("top_k", lambda v: v >= -1, "must be -1 (off) or >= 0"),
        within("top_p", 0.0, 1.0, lo_open=True),
        ge("n", 1),
    ],
    S.MultiTurnConfig: [
        ge("max_assistant_turns", 1),
        ge("max_user_turns", 0),
        ge("max_parallel_calls", 1),
        ge("max_tool_response_length", 1),
        one_of("format", C.TOOL_CALL_FORMATS),
        one_of("tool_response_truncate_side", C.TRUNCATE_SIDES),
        one_of("tokenization_sanity_check_mode", C.SANITY_CHECK_MODES),
        ge("token_drift_samples", 0),
    ],
    S.AgentLoopConfig: [one_of("default_agent_loop", C.AGENT_LOOPS)],
    S.SyncCheckConfig: [
        ge("canary_every", 0),
        one_of("on_mismatch", SYNC_MISMATCH_ACTIONS),
        gt("canary_tolerance", 0.0),
    ],
    S.RolloutConfig: [
        one_of("name", C.ROLLOUT_NAMES),
        one_of("mode", C.ROLLOUT_MODES),
        within("over_sample_rate", 0.0, 1.0, hi_open=True),
        ge("temperature", 0.0),
        Rule("top_k", lambda v: v >= -1, "must be -1 (off) or >= 0"),
        within("top_p", 0.0, 1.0, lo_open=True),
        ge("n", 1),
        ge("prompt_length", 1),
        ge("response_length", 1),
        one_of("dtype", C.DTYPES | frozenset(C.DTYPE_ALIASES)),
        ge("max_num_seqs", 1),
        within("gpu_memory_utilization", 0.0, 1.0, lo_open=True),
        ge("tensor_model_parallel_size", 1),
        ge("max_model_len", 1),
        *(ge(name, 1) for name in _LOGPROB_MICRO),
        ge("log_prob_max_token_len_per_gpu", 1),
    ],
    S.CriticConfig: [
        one_of("strategy", C.STRATEGIES | frozenset(C.STRATEGY_ALIASES)),
        ge("ppo_mini_batch_size", 1),
        *(ge(name, 1) for name in _MICRO),
        ge("forward_micro_batch_size_per_gpu", 1),
        ge("ppo_max_token_len_per_gpu", 1),
        ge("forward_max_token_len_per_gpu", 1),
        ge("ppo_epochs", 1),
        gt("grad_clip", 0.0),
        gt("cliprange_value", 0.0),
        one_of("loss_agg_mode", C.LOSS_AGG_MODES),
    ],
    S.OverlongBufferConfig: [],  # checked against data.max_response_length, only when enabled
    S.RewardModelConfig: [
        one_of("strategy", C.STRATEGIES | frozenset(C.STRATEGY_ALIASES)),
        ge("micro_batch_size", 1),
        ge("micro_batch_size_per_gpu", 1),
        ge("forward_max_token_len_per_gpu", 1),
        gt("timeout_s", 0.0),
    ],
    S.KLControlConfig: [one_of("type", C.KL_CTRL_TYPES), ge("kl_coef", 0.0), ge("horizon", 1), gt("target_kl", 0.0)],
    S.RolloutCorrectionConfig: [
        one_of("rollout_is", C.ROLLOUT_IS_LEVELS),
        one_of("rollout_rs", C.ROLLOUT_RS_MODES),
        one_of("loss_type", frozenset({"ppo_clip", "reinforce"})),
    ],
    S.AlgorithmConfig: [
        within("gamma", 0.0, 1.0),
        within("lam", 0.0, 1.0),
        one_of_or_registered("adv_estimator", C.ADV_ESTIMATORS, "adv_estimator"),
        one_of("kl_penalty", C.KL_ESTIMATORS),
    ],
    S.TrainerConfig: [
        each_of("logger", C.LOGGERS),
        ge("log_val_generations", 0),
        ge("total_epochs", 1),
        ge("total_training_steps", 1),
        ge("nnodes", 1),
        ge("n_gpus_per_node", 1),
        one_of("device", C.DEVICES),
        one_of("backend", C.BACKENDS),
        Rule("test_freq", lambda v: v == -1 or v >= 1, "must be -1 (off) or >= 1"),
        Rule("save_freq", lambda v: v == -1 or v >= 1, "must be -1 (off) or >= 1"),
        ge("critic_warmup", 0),
        one_of("resume_mode", C.RESUME_MODES),
        ge("max_actor_ckpt_to_keep", 1),
        ge("max_critic_ckpt_to_keep", 1),
        ge("rollout_data_max_rows", 1),
    ],
}


def _both_set(section: Any, prefix: str, pairs: tuple[tuple[str, str], ...]) -> None:
    for total, per_gpu in pairs:
        if getattr(section, total) is not None and getattr(section, per_gpu) is not None:
            raise ConfigError(
                f"{prefix}.{total} and {prefix}.{per_gpu} are both set; set only {per_gpu} "
                f"({total} is the deprecated global size)"
            )


def _check_algorithm(a: S.AlgorithmConfig, prefix: str) -> None:
    if a.norm_adv_by_std_in_rloo and a.adv_estimator != "rloo":
        raise ConfigError(
            f"{prefix}.norm_adv_by_std_in_rloo applies to adv_estimator=rloo only, got "
            f"{a.adv_estimator!r}; for GRPO use {prefix}.norm_adv_by_std_in_grpo"
        )
    _check_gdpo(a, prefix)


def _check_gdpo(a: S.AlgorithmConfig, prefix: str) -> None:
    if a.adv_estimator != "gdpo":
        if a.gdpo_reward_keys or a.gdpo_reward_weights:
            raise ConfigError(
                f"{prefix}.gdpo_reward_keys / gdpo_reward_weights apply to adv_estimator=gdpo only, "
                f"got {a.adv_estimator!r}"
            )
        return
    if not a.gdpo_reward_keys:
        raise ConfigError(
            f"{prefix}.gdpo_reward_keys: adv_estimator=gdpo needs the reward components, keys of the "
            "reward function's per-sample extra info (e.g. ['accuracy_reward', 'format_reward'])"
        )
    weights = a.gdpo_reward_weights
    if weights is not None and (len(weights) != len(a.gdpo_reward_keys) or not all(math.isfinite(w) for w in weights)):
        raise ConfigError(
            f"{prefix}.gdpo_reward_weights: must be {len(a.gdpo_reward_keys)} finite numbers, one per "
            f"{prefix}.gdpo_reward_keys entry, got {list(weights)!r}"
        )


def _check_actor(a: S.ActorConfig, prefix: str) -> None:
    _both_set(a, prefix, (_MICRO,))


def _check_placement(value: str, prefix: str) -> None:
    if value not in C.PLACEMENTS:
        raise ConfigError(f"{prefix}.placement: must be one of {sorted(C.PLACEMENTS)}, got {value!r}")


def _check_critic(c: S.CriticConfig, prefix: str) -> None:
    _both_set(c, prefix, (_MICRO,))
    _check_placement(c.placement, prefix)


def _check_logprob(section: S.RefConfig | S.RolloutConfig, prefix: str) -> None:
    _both_set(section, prefix, (_LOGPROB_MICRO,))


def _check_sampling(s: S.RolloutConfig | S.SamplingConfig, prefix: str) -> None:
    # HF generate and vLLM reject do_sample with temperature 0; greedy means do_sample=false.
    if s.do_sample and s.temperature == 0:
        raise ConfigError(
            f"{prefix}.temperature: must be > 0 when {prefix}.do_sample=true (use do_sample=false for greedy)"
        )


def _check_rollout(r: S.RolloutConfig, prefix: str) -> None:
    _check_logprob(r, prefix)
    _check_sampling(r, prefix)
    if r.stop:
        if any(not isinstance(s, str) or not s for s in r.stop):
            raise ConfigError(f"{prefix}.stop: must be a list of non-empty strings, got {list(r.stop)!r}")
        agent_loops = (
            r.multi_turn.enable
            or r.mode == "async"
            or float(r.over_sample_rate or 0) > 0
            or r.agent.default_agent_loop != "single_turn_agent"
        )
        if agent_loops:
            raise not_supported(
                f"{prefix}.stop",
                "stop strings apply to single-turn batches; with agent loops "
                "(multi_turn, mode=async, over_sample_rate, agent.default_agent_loop) leave it []",
            )
        if r.name not in ("hf", "vllm"):
            raise not_supported(f"{prefix}.stop", f"rollout.name={r.name} has no stop strings; use hf or vllm")


def _ratio_bounds_ok(spec: Any) -> bool:
    """``"low_high"`` or one positive number (the RS threshold grammar of verl)."""
    try:
        parts = [float(x) for x in str(spec).split("_", 1)]
    except ValueError:
        return False
    # a single bound is the high one, low = 1/high, so it must be >= 1
    return all(p > 0 and math.isfinite(p) for p in parts) and (
        parts[0] <= parts[1] if len(parts) == 2 else parts[0] >= 1
    )


def _check_rollout_correction(rc: S.RolloutCorrectionConfig, prefix: str) -> None:
    try:
        threshold = float(rc.rollout_is_threshold)
    except (TypeError, ValueError):
        threshold = -1.0
    if rc.rollout_is is not None and not (threshold > 0 and math.isfinite(threshold)):
        raise ConfigError(
            f"{prefix}.rollout_is_threshold: must be a number > 0 (the truncation bound C), "
            f"got {rc.rollout_is_threshold!r}"
        )
    if rc.rollout_rs is not None and not _ratio_bounds_ok(rc.rollout_rs_threshold):
        raise ConfigError(
            f"{prefix}.rollout_rs_threshold: must be 'low_high' (0 < low <= high, quoted) or one number >= 1 "
            f"when {prefix}.rollout_rs is set, got {rc.rollout_rs_threshold!r}"
        )


def _check_multi_turn(m: S.MultiTurnConfig, prefix: str) -> None:
    if m.enable and not (m.tool_config_path or m.function_tool_path or m.interaction_config_path):
        raise ConfigError(
            f"{prefix}.enable=true needs {prefix}.function_tool_path, {prefix}.tool_config_path or "
            f"{prefix}.interaction_config_path"
        )
    if m.use_inference_chat_template:
        raise ConfigError(
            f"`{prefix}.use_inference_chat_template` is not supported yet: leave it false "
            "(trajectories keep the sampled ids of every turn)"
        )
    if m.num_repeat_rollouts is not None:
        raise ConfigError(f"`{prefix}.num_repeat_rollouts` is not supported yet: use actor_rollout_ref.rollout.n")


def _check_agent(a: S.AgentLoopConfig, prefix: str) -> None:
    if any(v is not None for v in (a.custom_async_server or {}).values()):
        raise ConfigError(
            f"`{prefix}.custom_async_server` is not supported yet: the rollout engine serves the "
            "token-level request API itself (rollout.name=hf | vllm)"
        )


def _check_policy_loss(p: S.PolicyLossConfig, prefix: str) -> None:
    if p.clip_cov_lb >= p.clip_cov_ub:
        raise ConfigError(f"{prefix}.clip_cov_lb: must be < {prefix}.clip_cov_ub={p.clip_cov_ub}, got {p.clip_cov_lb}")
    if p.loss_mode == "dro" and p.dro_beta is None:
        raise ConfigError(f"{prefix}.dro_beta: must be set (> 0) when {prefix}.loss_mode=dro")


def _check_reward_model(rm: S.RewardModelConfig, prefix: str) -> None:
    _both_set(rm, prefix, (("micro_batch_size", "micro_batch_size_per_gpu"),))
    _check_placement(rm.placement, prefix)
    if rm.enable and not rm.model.path:
        raise ConfigError(f"{prefix}.model.path: must be set when {prefix}.enable=true")


def _check_lora(m: S.ModelConfig, prefix: str) -> None:
    """The LoRA fields matter only with ``lora_rank > 0`` (verl's defaults set them with LoRA off)."""
    import re

    if m.lora_rank == 0:
        return
    if m.lora_alpha <= 0:
        raise ConfigError(f"{prefix}.lora_alpha: must be > 0 when {prefix}.lora_rank > 0, got {m.lora_alpha}")
    if m.exclude_modules is not None:
        try:
            re.compile(str(m.exclude_modules))
        except re.error as e:
            raise ConfigError(
                f"{prefix}.exclude_modules: not a valid regular expression ({e}): {m.exclude_modules!r}"
            ) from None


def _check_trainer(t: S.TrainerConfig, prefix: str) -> None:
    import importlib.util

    # fail before any model loads, not at the first log call (wandb is a dependency: a broken install)
    for name, how in (("wandb", "pip install wandb"), ("mlflow", "pip install 'verl[mlflow]'")):
        if name in t.logger and importlib.util.find_spec(name) is None:
            raise ConfigError(f"{prefix}.logger: '{name}' needs the {name} package ({how})")
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        raise ConfigError(f"{prefix}.resume_from_path: must be set when {prefix}.resume_mode=resume_path")
    if t.rollout_data_max_rows is not None and not t.rollout_data_dir:
        raise ConfigError(
            f"{prefix}.rollout_data_max_rows: bounds the rollout dump, which is off; set {prefix}.rollout_data_dir too"
        )
    if t.sentinel.enable and t.sentinel.action == "rollback" and t.save_freq <= 0:
        raise ConfigError(
            f"{prefix}.sentinel.action: rollback restores the last good checkpoint; set {prefix}.save_freq > 0"
        )
    if t.sentinel.enable and t.sentinel.action == "rollback" and t.v1.trainer_mode != "sync":
        raise not_supported(
            f"{prefix}.sentinel.action=rollback",
            f"with {prefix}.v1.trainer_mode={t.v1.trainer_mode} the sentinel can warn or stop (action=warn|stop)",
        )
    world = t.nnodes * t.n_gpus_per_node
    if t.backend == "local" and world > 1:
        raise ConfigError(
            f"{prefix}.backend: 'local' runs one process, but {prefix}.nnodes x {prefix}.n_gpus_per_node = {world}; "
            "use backend=ray or auto"
        )


SECTION_CHECKS: dict[type, Callable[[Any, str], None]] = {
    S.ActorConfig: _check_actor,
    S.ModelConfig: _check_lora,
    S.CriticModelConfig: _check_lora,
    S.AlgorithmConfig: _check_algorithm,
    S.CriticConfig: _check_critic,
    S.RefConfig: _check_logprob,
    S.RolloutConfig: _check_rollout,
    S.RolloutCorrectionConfig: _check_rollout_correction,
    S.SamplingConfig: _check_sampling,
    S.MultiTurnConfig: _check_multi_turn,
    S.AgentLoopConfig: _check_agent,
    S.PolicyLossConfig: _check_policy_loss,
    S.RewardModelConfig: _check_reward_model,
    S.TrainerConfig: _check_trainer,
    DistillationConfig: check_distillation_section,
    S.AlarmsConfig: check_alarms,
    S.SentinelConfig: check_sentinel,
}
"""Cross-field rules that stay inside one section, keyed by the section's dataclass."""


def _apply_rules(section: Any, prefix: str, rules: dict[type, list[Rule]]) -> None:
    for rule in rules.get(type(section), ()):
        value = getattr(section, rule.field)
        if value is None or rule.ok(value):
            continue
        key = f"{prefix}.{rule.field}" if prefix else rule.field
        if rule.unsupported:
            raise ConfigError(f"{rule.what or f'`{key}`'} is not supported yet: {rule.unsupported}")
        hint = ""
        if rule.allowed:
            bad = value if isinstance(value, str) else next(x for x in value if x not in rule.allowed)
            hint = did_you_mean(str(bad), rule.allowed)
        raise ConfigError(f"{key}: {rule.expect}, got {value!r}{hint}")


def check_sections(
    cfg: Any,
    prefix: str = "",
    rules: dict[type, list[Rule]] | None = None,
    checks: dict[type, Callable[[Any, str], None]] | None = None,
) -> None:
    """Applies every section's rules and cross-field checks, depth first.

    Args:
        cfg: A schema dataclass instance (normally the ``RootConfig``).
        prefix: Its dotted path (``""`` for the root).
        rules: The rule tables, keyed by section dataclass (default :data:`SECTION_RULES`, the
            RL schema's; `verl.config.sft_checks` passes the SFT schema's).
        checks: The cross-field functions ``check(section, prefix)``, likewise (default
            :data:`SECTION_CHECKS`).

    Raises:
        ConfigError: The first violated rule, naming the full dotted key.
    """
    rules = SECTION_RULES if rules is None else rules
    checks = SECTION_CHECKS if checks is None else checks
    _apply_rules(cfg, prefix, rules)
    if prefix:
        check = checks.get(type(cfg))
        if check is not None:
            check(cfg, prefix)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            check_sections(value, f"{prefix}.{f.name}" if prefix else f.name, rules, checks)
