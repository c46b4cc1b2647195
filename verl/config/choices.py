"""Allowed values of the config's enumerated fields, as plain string sets.

The config package checks names against these sets at load time so that a typo fails before
any model loads. They are kept here as plain strings (not imported from the algorithm or
rollout registries) because ``verl.config`` must not import the packages it configures (the
layer order `.ci/check_imports.py` enforces). A test in ``tests/config`` compares them with the
registries when those exist, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

ADV_ESTIMATORS: frozenset[str] = frozenset(
    {
        "gae",
        "grpo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "opo",
        "gpg",
        "grpo_passk",
        "grpo_vectorized",
        "rloo_vectorized",
        "gdpo",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    }
)
"""``algorithm.adv_estimator`` values (verl's names)."""

CRITIC_ESTIMATORS: frozenset[str] = frozenset({"gae"})
"""Estimators that need a value model; ``critic.enable`` defaults to True exactly for these."""

GROUP_ESTIMATORS: frozenset[str] = frozenset(
    {"grpo", "rloo", "grpo_passk", "opo", "gpg", "reinforce_plus_plus_baseline", "rloo_vectorized"}
)
"""Estimators whose baseline is computed from the other samples of the same prompt.

With ``rollout.n == 1`` the group holds only the sample itself, so its own reward would be its
baseline and every advantage 0 (RLOO's leave-one-out mean is even undefined).
``rollout.n < 2`` is a configuration error for these, except :data:`SINGLETON_ESTIMATORS`.
"""

SINGLETON_ESTIMATORS: frozenset[str] = frozenset({"grpo", "rloo"})
"""Group estimators that run with ``rollout.n == 1`` as verl runs them (verl's default ``n``): a
group of one has baseline 0 (GRPO: mean 0, std 1), i.e. baseline-free REINFORCE on the raw score;
the config check logs once that a group baseline needs ``rollout.n >= 2``.
"""

LOSS_AGG_MODES: frozenset[str] = frozenset(
    {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}
)
"""``*.loss_agg_mode`` values (see ``verl.algorithms`` ``agg_loss``)."""

POLICY_LOSS_MODES: frozenset[str] = frozenset(
    {
        "vanilla",
        "gspo",
        "gpg",
        "cispo",
        "clip_cov",
        "kl_cov",
        "sapo",
        "geo_mean",
        "dppo_tv",
        "dppo_kl",
        "dro",
        "bypass_mode",
    }
)
"""``actor_rollout_ref.actor.policy_loss.loss_mode`` values."""

_KL_BASE: frozenset[str] = frozenset({"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"})
KL_ESTIMATORS: frozenset[str] = _KL_BASE | frozenset(f"{name}+" for name in _KL_BASE)
"""``algorithm.kl_penalty`` and ``actor.kl_loss_type`` values; a trailing ``+`` selects the
straight-through variant (value of the named estimator, gradient of k2)."""

KL_CTRL_TYPES: frozenset[str] = frozenset({"fixed", "adaptive"})
ROLLOUT_NAMES: frozenset[str] = frozenset({"hf", "vllm", "sglang"})
GPU_ONLY_ROLLOUTS: frozenset[str] = frozenset({"sglang"})
ROLLOUT_IS_LEVELS: frozenset[str] = frozenset({"token", "sequence"})
ROLLOUT_RS_MODES: frozenset[str] = frozenset({"token_k1", "seq_sum_k1", "seq_mean_k1"})

ROLLOUT_MODES: frozenset[str] = frozenset({"sync", "async"})
TOOL_CALL_FORMATS: frozenset[str] = frozenset({"hermes"})
TRUNCATE_SIDES: frozenset[str] = frozenset({"left", "right", "middle"})
SANITY_CHECK_MODES: frozenset[str] = frozenset({"strict", "ignore_strippable", "disable"})
AGENT_LOOPS: frozenset[str] = frozenset({"single_turn_agent", "tool_agent"})
RESUME_MODES: frozenset[str] = frozenset({"auto", "disable", "resume_path"})
DEVICES: frozenset[str] = frozenset({"cpu", "cuda"})
BACKENDS: frozenset[str] = frozenset({"local", "ray", "auto"})
PLACEMENTS: frozenset[str] = frozenset({"colocated", "separate"})
TRUNCATIONS: frozenset[str] = frozenset({"error", "left", "right", "middle"})
WARMUP_STYLES: frozenset[str] = frozenset({"constant", "cosine", "linear"})
LOGGERS: frozenset[str] = frozenset({"console", "jsonl", "tensorboard", "wandb", "mlflow", "file"})
STRATEGIES: frozenset[str] = frozenset({"fsdp2"})
CHECKPOINT_CONTENTS: frozenset[str] = frozenset({"model", "optimizer", "extra", "hf_model"})
DTYPES: frozenset[str] = frozenset({"float32", "bfloat16", "float16"})

DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
}
"""Spellings accepted for dtypes and normalised by ``finalize`` (verl/HF scripts use both)."""

EXTENSIONS: dict[str, set[str]] = {"adv_estimator": set(), "policy_loss": set()}
"""Names registered by user code at run time (``verl.trainer.ppo.core_algos.register_adv_est`` /
``register_policy_loss``, imported from ``actor_rollout_ref.model.external_lib``); the checks
accept them besides the built-in sets above. Filled by those decorators, never by the config
package. (Reward-manager names are checked when the manager is built.)"""

STRATEGY_ALIASES: dict[str, str] = {"fsdp": "fsdp2"}
"""verl's ``strategy: fsdp`` means the FSDP engine; here that engine is FSDP2."""
