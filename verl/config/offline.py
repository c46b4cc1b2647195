"""Config of the offline tools: ``verl generate`` (verl's ``main_generation``) and ``verl eval`` (``main_eval``).

Both run the shared pipeline (`verl.config.pipeline`: the YAML reader, ``defaults:`` lists and
presets, the override applier, the unknown-key walker) with their own layout
(`GENERATION_LAYOUT`, `EVAL_LAYOUT`), exactly as the trainers do: unknown keys are refused with
the closest valid one, values are type-checked, every failure is one `ConfigError` line naming
the dotted key.

``verl generate`` keeps verl's ``generation.yaml`` layout: ``data.*`` is its own section
(`GenerationDataConfig`); ``model.*``, ``rollout.*``, ``trainer.*`` and ``ray_kwargs.*`` are the
RL schema's ``actor_rollout_ref.{model,rollout}``, ``trainer`` and ``ray_kwargs`` sections,
checked by the RL loader (`verl.config.loader.config_from_dict`), so a rollout key means exactly
what it means in training. Keys generation does not read are refused unless at their default
(`GENERATION_KEYS`), except those of verl's own ``generation.yaml`` that configure work it does
not do — ``actor.*`` and ``rollout.log_prob_*`` (`GENERATION_NOOPS`) — accepted and named in a note.
``verl eval`` keeps verl's ``evaluation.yaml`` layout (`EvalConfig`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf

from verl.config._tree import get_path, set_path
from verl.config.checks import Rule, check_sections, ge, gt, one_of
from verl.config.errors import ConfigError
from verl.config.pipeline import PRESET_DIR, Layout, load_tree, structured
from verl.config.schema import CustomRewardFunctionConfig, ModelConfig, RolloutConfig, TrainerConfig
from verl.config.compat.schema_verl import RayKwargsConfig
from verl.config.compat.verl_inert import strip_verl_keys

__all__ = ["EvalConfig", "GenerationConfig", "GenerationDataConfig", "load_eval_config", "load_generation_config"]

TRUNCATION = ("error", "left", "right", "middle")


@dataclass
class GenerationDataConfig:
    path: Optional[str] = None
    # Prompts file: .parquet, .jsonl or builtin://<task>/<split> (verl's RL rows; only prompt_key is read).
    prompt_key: str = "prompt"
    # Column of chat messages [{role, content}, ...].
    n_samples: int = 1
    # Responses per prompt.
    output_path: Optional[str] = None
    # The input rows plus a `responses` column (a list of n_samples strings): .parquet or .jsonl.
    batch_size: int = 128
    # Prompts per engine call (memory only: the samples do not depend on it).
    trust_remote_code: bool = False
    # Tokenizer code from the model directory (as model.trust_remote_code).
    apply_chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra chat-template arguments, e.g. {enable_thinking: false}.
    truncation: str = "error"
    # A prompt longer than rollout.prompt_length: error | left | right | middle (as data.truncation).


@dataclass
class GenerationConfig:
    """``verl generate``: ``data`` (this tool's) and the RL config holding model / rollout / trainer."""

    data: GenerationDataConfig
    rl: Any
    # verl.config.schema.RootConfig: actor_rollout_ref.{model,rollout}, trainer.device, trainer.seed.
    lengths_set: tuple[bool, bool] = (False, False)
    # Whether rollout.prompt_length / rollout.response_length were set (else generate derives them).
    ignored: tuple[str, ...] = ()
    # The documented no-ops found in the config (GENERATION_NOOPS), named in a note when generating.


@dataclass
class EvalDataConfig:
    path: Optional[str] = None
    # The generated file (verl generate's output): .parquet or .jsonl.
    prompt_key: str = "prompt"
    # Accepted for verl's evaluation.yaml; not read (another value is refused).
    response_key: str = "responses"
    # Column of generated responses: a list of strings per row (or one string).
    data_source_key: str = "data_source"
    # Column naming the scorer (built-in scorers are routed by data source).
    reward_model_key: str = "reward_model"
    # Column of dicts holding `ground_truth`.


@dataclass
class EvalRewardModelConfig:
    timeout_s: float = 30.0
    # Seconds a scorer may take per response; over it the score is 0 and counted (as in training).


@dataclass
class EvalConfig:
    data: EvalDataConfig = field(default_factory=EvalDataConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    # The RL schema's section: path (None = built-in scorers by data_source), name, reward_kwargs.
    reward_model: EvalRewardModelConfig = field(default_factory=EvalRewardModelConfig)
    ray_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Accepted for verl's scripts with null values only: scoring runs in this process, not on Ray.


@dataclass
class GenerationFileConfig:
    """The keys of a ``verl generate`` file: this tool's ``data`` and the RL sections it reads.

    Only the key walk and the overrides use it; the RL sections' values are checked by the RL
    loader once placed at their RL paths (see `load_generation_config`).
    """

    data: GenerationDataConfig = field(default_factory=GenerationDataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # As actor_rollout_ref.model.
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    # As actor_rollout_ref.rollout; prompt_length / response_length unset = derived from the file.
    actor: Dict[str, Any] = field(default_factory=dict)
    # verl's generation.yaml has it; generation does not train (a documented no-op, GENERATION_NOOPS).
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # device, seed, nnodes, n_gpus_per_node are read.
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    # As the RL ray_kwargs.


def _refuse_in_generate(path: str, value: Any, default: Any) -> None:
    """verl's keys without effect in the RL sections are refused off verl's default, as every key
    verl generate does not read (`_refuse_unused`)."""
    if value != default:
        raise ConfigError(f"{path}={value!r} has no effect in verl generate: remove it")


def _refuse_in_eval(path: str, value: Any, default: Any) -> None:
    if value not in (None, {}):
        raise ConfigError(f"{path} is not supported yet: verl eval scores in this process, not on Ray; remove it")


GENERATION_LAYOUT = Layout(
    root=GenerationFileConfig,
    name="verl generate",
    preset_dir=PRESET_DIR / "generate",
    name_experiment=False,
    verl_keys=lambda tree: strip_verl_keys(tree, GenerationFileConfig, _refuse_in_generate),
)
"""``verl generate`` in the shared pipeline (`verl.config.pipeline`); presets in ``presets/generate``."""
EVAL_LAYOUT = Layout(
    root=EvalConfig,
    name="verl eval",
    preset_dir=PRESET_DIR / "eval",
    name_experiment=False,
    verl_keys=lambda tree: strip_verl_keys(tree, EvalConfig, _refuse_in_eval),
)
"""``verl eval`` in the shared pipeline; presets in ``presets/eval``."""


OFFLINE_RULES: dict[type, list[Rule]] = {
    GenerationDataConfig: [
        ge("n_samples", 1),
        ge("batch_size", 1),
        one_of("truncation", frozenset(TRUNCATION)),
        Rule("output_path", lambda v: v.endswith((".parquet", ".jsonl")), "must end in .parquet or .jsonl"),
    ],
    EvalRewardModelConfig: [gt("timeout_s", 0.0)],
}
"""Per-section value rules of ``verl generate`` / ``verl eval`` (`verl.config.checks.Rule` tables, as the
trainers'); rules across sections, or on whether a key is set, follow in the loaders."""


def _drop_null_sections(tree: dict[str, Any]) -> dict[str, Any]:
    """``section: null`` (verl's files write empty sections so) means the section's defaults."""
    return {k: v for k, v in tree.items() if v is not None}


_RL_PLACE = {
    "model": "actor_rollout_ref.model",
    "rollout": "actor_rollout_ref.rollout",
    "actor": "actor_rollout_ref.actor",
}
# Keys of the RL sections that take effect in verl generate (a key, or the top of a mapping key);
# any other key set to a value other than its RL default is refused as having no effect here.
GENERATION_KEYS = {
    "model": {"path", "tokenizer_path", "trust_remote_code", "dtype", "override_config", "external_lib"},
    "rollout": {
        "name",
        "mode",
        "temperature",
        "top_k",
        "top_p",
        "do_sample",
        "prompt_length",
        "response_length",
        "dtype",
        "ignore_eos",
        "max_num_seqs",
        "max_model_len",
        "enforce_eager",
        "seed",
        "calculate_log_probs",
        "free_cache_engine",
        "stop",
        "include_stop_str_in_output",
        # read by the vllm engine (verl.workers.rollout.vllm.vllm_config: its keys, passed through or
        # refused there in one line when the adapter cannot honour them)
        "gpu_memory_utilization",
        "tensor_model_parallel_size",
        "load_format",
        "engine_kwargs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "scheduling_policy",
        "disable_log_stats",
        "quantization",
        "cudagraph_capture_sizes",
        "data_parallel_size",
        "expert_parallel_size",
        "pipeline_model_parallel_size",
        "logprobs_mode",
        "skip_tokenizer_init",
        "quantization_config_file",
        "multi_stage_wake_up",
        "layered_summon",
    },
    "trainer": {"device", "seed", "nnodes", "n_gpus_per_node"},
    "ray_kwargs": set(),
}
# Keys of verl's own generation.yaml that configure work generation does not do (the training
# side's log-prob micro-batching, the actor): documented no-ops, accepted and named in a note.
GENERATION_NOOPS = (
    "actor",
    "rollout.log_prob_micro_batch_size",
    "rollout.log_prob_micro_batch_size_per_gpu",
    "rollout.log_prob_use_dynamic_bsz",
    "rollout.log_prob_max_token_len_per_gpu",
)
_HINTS = {
    "rollout.n": "set data.n_samples (responses per prompt)",
    "rollout.val_kwargs": "verl generate samples with rollout.temperature / top_k / top_p / do_sample",
}
# Placeholders the RL loader sees for unset lengths (its checks must not use its 512 defaults);
# `verl.trainer.main_generation` derives the real lengths from the file and the model.
_UNSET_LENGTH = 1


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _drop_noops(tree: dict[str, Any]) -> list[str]:
    """Remove the `GENERATION_NOOPS` from ``tree``; returns the dotted keys removed."""
    dropped = []
    for key in GENERATION_NOOPS:
        parent, leaf = get_path(tree, key)
        if parent is not None and leaf in parent:
            dropped += (
                [f"{key}.{k}" for k, _ in _leaves(parent[leaf])]
                if isinstance(parent[leaf], dict) and parent[leaf]
                else [key]
            )
            del parent[leaf]
    return dropped


def _refuse_unused(tree: dict[str, Any]) -> None:
    """A key of the RL sections that verl generate does not read, set to a non-default value, is an error."""
    from verl.config.schema import RootConfig

    defaults = OmegaConf.to_container(OmegaConf.structured(RootConfig), resolve=False)
    for section, allowed in GENERATION_KEYS.items():
        for key, value in _leaves(tree.get(section) or {}):
            if key.split(".")[0] in allowed:
                continue
            parent, leaf = get_path(defaults, f"{_RL_PLACE.get(section, section)}.{key}")  # type: ignore[arg-type]
            if parent is None or leaf not in parent:
                continue  # an unknown key: the RL loader names it with the closest valid one
            if value != parent[leaf]:
                full = f"{section}.{key}"
                hint = next((h for k, h in _HINTS.items() if full == k or full.startswith(k + ".")), "remove it")
                raise ConfigError(f"{full}={value!r} has no effect in verl generate: {hint}")


def _rl_message(message: str) -> str:
    """The RL loader's message with this tool's key names."""
    for section, place in _RL_PLACE.items():
        message = message.replace(place, section)
    return message.replace("data.max_prompt_length", "rollout.prompt_length").replace(
        "data.max_response_length", "rollout.response_length"
    )


def load_generation_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> GenerationConfig:
    """Load ``verl generate``'s config (verl's ``generation.yaml`` keys; see the module docstring).

    ``rollout.prompt_length`` / ``response_length``, when set, are the RL ``data.max_prompt_length`` /
    ``max_response_length`` too; unset, `verl.trainer.main_generation` derives them from the file
    and the model. ``model.path`` defaults to the RL default, the built-in model. Keys of the RL
    sections that generation does not read (`GENERATION_KEYS`) are refused when set to anything
    but their default.

    Raises:
        ConfigError: unknown key (with the closest valid one), wrong type, a key with no effect
            here, a missing ``data.path`` / ``data.output_path``, ``data.n_samples`` < 1, greedy
            decoding with ``n_samples`` > 1, a negative seed, more than one process, or a setting
            of the RL sections that the RL loader refuses (its message, with the keys as written here).
    """
    from verl.config.loader import config_from_dict

    tree = load_tree(GENERATION_LAYOUT, path, overrides, before_overrides=_drop_null_sections)
    data = structured(GenerationDataConfig, tree.get("data") or {}, "data.")
    ignored = _drop_noops(tree)
    _refuse_unused(tree)
    rl: dict[str, Any] = {}
    for section in ("model", "rollout", "trainer", "ray_kwargs"):
        if tree.get(section):
            set_path(rl, _RL_PLACE.get(section, section), tree[section])
    rollout = tree.get("rollout") or {}
    # the model's budget is checked once the lengths are known (`main_generation._set_lengths`),
    # never against the RL loader's placeholders below
    max_model_len = (rl.get("actor_rollout_ref", {}).get("rollout") or {}).pop("max_model_len", None)
    lengths_set = (rollout.get("prompt_length") is not None, rollout.get("response_length") is not None)
    for (ours, theirs), is_set in zip(
        (("prompt_length", "max_prompt_length"), ("response_length", "max_response_length")), lengths_set
    ):
        set_path(rl, f"data.{theirs}", rollout[ours] if is_set else _UNSET_LENGTH)
    try:
        cfg = config_from_dict(rl)
    except ConfigError as e:
        raise ConfigError(_rl_message(str(e))) from None
    ro, t = cfg.actor_rollout_ref.rollout, cfg.trainer
    if max_model_len is not None:
        if not isinstance(max_model_len, int) or isinstance(max_model_len, bool) or max_model_len < 2:
            raise ConfigError(f"rollout.max_model_len: must be an integer >= 2, got {max_model_len!r}")
        ro.max_model_len = max_model_len
    check_sections(data, "data", rules=OFFLINE_RULES, checks={})
    _check_generation(data, ro, t)
    return GenerationConfig(data=data, rl=cfg, lengths_set=lengths_set, ignored=tuple(ignored))


def _check_generation(data: GenerationDataConfig, ro: Any, t: Any) -> None:
    """Rules of ``verl generate`` across its sections, or on whether a key is set.

    Args:
        data: This tool's ``data`` section.
        ro: The RL rollout section (``rollout.*`` here).
        t: The RL trainer section.

    Raises:
        ConfigError: the first rule broken (one line, with this tool's key names).
    """
    if not data.path:
        raise ConfigError("data.path: set the prompts file (.parquet, .jsonl or builtin://<task>/<split>)")
    if not data.output_path:
        raise ConfigError("data.output_path: set where the generated file goes (.parquet or .jsonl)")
    if not ro.do_sample and data.n_samples != 1:  # (the RL loader refuses temperature 0 with do_sample)
        raise ConfigError(
            f"data.n_samples={data.n_samples} with greedy decoding (rollout.do_sample=false) gives identical "
            "samples: set data.n_samples=1 or rollout.do_sample=true"
        )
    if t.seed < 0:
        raise ConfigError(f"trainer.seed: must be >= 0, got {t.seed}")
    if ro.seed is not None and ro.seed < 0:
        raise ConfigError(f"rollout.seed: must be >= 0, got {ro.seed}")
    if t.nnodes * t.n_gpus_per_node != 1:
        raise ConfigError(
            f"trainer.n_gpus_per_node={t.n_gpus_per_node}, trainer.nnodes={t.nnodes} is not supported yet: "
            "verl generate runs one engine in this process; use 1 and 1 (split the file to run several)"
        )
    if ro.name not in ("hf", "vllm"):
        raise ConfigError(f"rollout.name={ro.name} is not supported yet by verl generate: use hf or vllm")
    if ro.multi_turn.enable:
        raise ConfigError(
            "rollout.multi_turn.enable is not supported yet by verl generate: it samples single-turn responses"
        )


def load_eval_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> EvalConfig:
    """Load ``verl eval``'s config (verl's ``evaluation.yaml`` keys).

    Raises:
        ConfigError: unknown key (with the closest valid one), wrong type, no ``data.path``, a
            non-null ``ray_kwargs`` value (scoring runs in this process), ``timeout_s`` <= 0.
    """
    cfg = structured(EvalConfig, load_tree(EVAL_LAYOUT, path, overrides, before_overrides=_drop_null_sections))
    set_key = next((f"ray_kwargs.{k}" for k, v in _leaves(cfg.ray_kwargs) if v not in (None, {})), None)
    if set_key:
        raise ConfigError(f"{set_key} is not supported yet: verl eval scores in this process, not on Ray; remove it")
    if not cfg.data.path:
        raise ConfigError("data.path: set the generated file to score (verl generate's data.output_path)")
    if cfg.data.prompt_key != "prompt":
        raise ConfigError("data.prompt_key has no effect in verl eval (scores depend on the responses only): remove it")
    check_sections(cfg, rules=OFFLINE_RULES, checks={})
    return cfg
