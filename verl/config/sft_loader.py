"""Loading the supervised trainers' config (`verl.config.sft_schema`): YAML + overrides -> checked dataclasses.

Same rules as the RL loader (`verl.config.loader`): Hydra-grammar overrides (``a.b=c``,
``+a.b=c`` — which verl's SFT scripts also use for keys that exist — and ``~a.b``), unknown keys
rejected with a did-you-mean, values type-checked by OmegaConf, ranges and unsupported settings
checked once, and every failure a one-line `ConfigError` naming the dotted key.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.config._tree import get_path, merge_trees, nested, set_path
from verl.config.errors import ConfigError, did_you_mean
from verl.config.sft_schema import SFTRootConfig

__all__ = ["apply_tree_overrides", "load_sft_config", "read_yaml_tree", "sft_config_to_yaml"]

ALGORITHMS = ("sft", "dpo", "hybrid")
HYBRID_LOSSES = ("sft", "dpo", "rl")


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _inner(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def _free(tp: Any) -> bool:
    tp = _inner(tp)
    return tp is Any or typing.get_origin(tp) is dict


def _check_keys(tree: Any, cls: type, prefix: str) -> None:
    """Reject unknown keys (did-you-mean among the section's keys); turn a scalar into a 1-list for List[str]."""
    hints = _fields(cls)
    for key in list(tree):
        path = f"{prefix}{key}"
        if key not in hints:
            raise ConfigError(f"unknown key '{path}'" + did_you_mean(str(key), hints))
        tp, value = _inner(hints[key]), tree[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a mapping (config section), got {value!r}")
            _check_keys(value, tp, path + ".")
        elif typing.get_origin(tp) is list:
            (elem,) = typing.get_args(tp)
            if dataclasses.is_dataclass(elem) and isinstance(value, list):
                for i, v in enumerate(value):
                    if not isinstance(v, dict):
                        raise ConfigError(f"{path}[{i}]: expected a mapping, got {v!r}")
                    _check_keys(v, elem, f"{path}[{i}].")
            elif value is None:
                tree[key] = []
            elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
                tree[key] = [value]  # verl's scripts write trainer.logger=console


def _key_type(key: str) -> Any:
    cls: Any = SFTRootConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return "free" if _free(cls) else None
        hints = _fields(cls)
        if part not in hints:
            return None
        cls = _inner(hints[part])
    return cls


def apply_tree_overrides(tree: dict[str, Any], overrides: Sequence[str], check_keys: bool = True) -> dict[str, Any]:
    """Hydra-grammar overrides on a plain tree (not modified): ``a.b=v`` (a mapping merges into a
    mapping), ``+a.b=v``, ``~a.b``; sweeps and package overrides are refused.

    ``check_keys``: refuse keys of no `SFTRootConfig` section (with the closest valid one); the
    offline tools (`verl.config.offline`) check their sections themselves.
    """
    from verl.config.overrides import parse_overrides

    tree = merge_trees({}, tree)
    for o in parse_overrides(overrides):
        key = o.key_or_group
        if o.package is not None or o.is_sweep_override():
            raise ConfigError(f"override '{o.input_line}': sweeps and package overrides are not supported")
        if check_keys and _key_type(key) is None:
            parent, _, leaf = key.rpartition(".")
            siblings = _fields(_key_type(parent)) if parent and dataclasses.is_dataclass(_key_type(parent)) else _fields(SFTRootConfig)
            raise ConfigError(f"unknown key '{key}'" + did_you_mean(leaf, siblings))
        if o.is_delete():
            parent_d, leaf = get_path(tree, key)
            if parent_d is not None:
                parent_d.pop(leaf, None)
            continue
        value = o.value()
        parent_d, leaf = get_path(tree, key)
        if isinstance(value, dict) and parent_d is not None and isinstance(parent_d.get(leaf), dict):
            tree = merge_trees(tree, nested(key, value))
        else:
            set_path(tree, key, value)
    return tree


def _check(cfg: SFTRootConfig) -> None:
    d, m, o, t, p = cfg.data, cfg.model, cfg.optim, cfg.trainer, cfg.dpo
    rules = [
        (t.algorithm in ALGORITHMS, f"trainer.algorithm: must be one of {ALGORITHMS}, got {t.algorithm!r}"),
        (d.truncation in ("error", "left", "right"), f"data.truncation: must be error | left | right, got {d.truncation!r}"),
        (d.train_batch_size >= 1, "data.train_batch_size: must be >= 1"),
        (d.micro_batch_size_per_gpu >= 1, "data.micro_batch_size_per_gpu: must be >= 1"),
        (d.max_length >= 2, "data.max_length: must be >= 2"),
        (not d.balance_dp_token, "data.balance_dp_token is not supported yet: the loss already divides by the global token count, leave it false"),
        (d.custom_cls.path is None, "data.custom_cls is not supported yet: convert the data to parquet/jsonl with prompt/response columns"),
        (m.strategy in ("fsdp", "fsdp2"), f"model.strategy: must be fsdp | fsdp2, got {m.strategy!r}"),
        (not m.use_liger, "model.use_liger is not supported yet: set it to false"),
        (m.fsdp_config.model_dtype in ("fp32", "bf16", "float32", "bfloat16"), f"model.fsdp_config.model_dtype: must be fp32 | bf16, got {m.fsdp_config.model_dtype!r}"),
        (m.fsdp_config.wrap_policy.get("min_num_params", 0) == 0, "model.fsdp_config.wrap_policy.min_num_params is not supported yet: FSDP2 wraps every transformer block; use 0"),
        (m.lora_rank >= 0, "model.lora_rank: must be >= 0"),
        (o.lr_scheduler in ("cosine", "constant"), f"optim.lr_scheduler: must be cosine | constant, got {o.lr_scheduler!r}"),
        (o.lr > 0 and o.clip_grad > 0, "optim.lr and optim.clip_grad: must be > 0"),
        (0.0 <= o.warmup_steps_ratio <= 1.0, "optim.warmup_steps_ratio: must be in [0, 1]"),
        (p.loss_type in ("sigmoid", "ipo"), f"dpo.loss_type: must be sigmoid | ipo, got {p.loss_type!r}"),
        (p.beta > 0, "dpo.beta: must be > 0"),
        (0.0 <= p.label_smoothing < 0.5, "dpo.label_smoothing: must be in [0, 0.5)"),
        (p.loss_type == "sigmoid" or p.label_smoothing == 0, "dpo.label_smoothing: applies to loss_type=sigmoid only"),
        (p.reference in ("auto", "copy"), f"dpo.reference: must be auto | copy, got {p.reference!r}"),
        (t.default_hdfs_dir is None, "trainer.default_hdfs_dir is not supported yet: set it to null and copy default_local_dir yourself"),
        (t.resume_mode in ("auto", "disable", "resume_path"), f"trainer.resume_mode: must be auto | disable | resume_path, got {t.resume_mode!r}"),
        (t.device in ("cpu", "cuda"), f"trainer.device: must be cpu | cuda, got {t.device!r}"),
        (cfg.ulysses_sequence_parallel_size >= 1, "ulysses_sequence_parallel_size: must be >= 1"),
        (cfg.ulysses_sequence_parallel_size == 1 or cfg.use_remove_padding,
         f"ulysses_sequence_parallel_size={cfg.ulysses_sequence_parallel_size} needs use_remove_padding=true: "
         "sequence parallelism splits packed (padding-free) sequences"),
        (cfg.ulysses_sequence_parallel_size == 1 or t.algorithm == "sft",
         f"ulysses_sequence_parallel_size with trainer.algorithm={t.algorithm} is not supported yet: use 1 (sft only)"),
        (d.max_token_len_per_gpu >= 1, "data.max_token_len_per_gpu: must be >= 1"),
        (m.fsdp_config.mixed_precision in (None, "bfloat16", "float32", "bf16", "fp32"),
         f"model.fsdp_config.mixed_precision: must be bfloat16 | float32 | null, got {m.fsdp_config.mixed_precision!r}"),
        *_checkpoint_rules(cfg),
    ]
    for ok, message in rules:
        if not ok:
            raise ConfigError(message)
    _check_hybrid(cfg)


CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")


def _checkpoint_rules(cfg: SFTRootConfig) -> list[tuple[bool, str]]:
    c, t = cfg.checkpoint, cfg.trainer
    rules = [(_freq_ok(t.save_freq), f"trainer.save_freq: must be an integer or after_each_epoch, got {t.save_freq!r}"),
             (_freq_ok(t.test_freq), f"trainer.test_freq: must be an integer or after_each_epoch, got {t.test_freq!r}")]
    for key in ("save_contents", "load_contents"):
        values = list(getattr(c, key))
        bad = [v for v in values if v not in CHECKPOINT_CONTENTS]
        rules.append((not bad, f"checkpoint.{key}: unknown part {bad[:1]}; allowed: {list(CHECKPOINT_CONTENTS)}"))
        rules.append(("model" in values, f"`checkpoint.{key}` without model is not supported yet: the weights are "
                                         "what a resume starts from; add model"))
    return rules


def _freq_ok(value: object) -> bool:
    return value == "after_each_epoch" or (isinstance(value, int) and not isinstance(value, bool))


def _check_hybrid(cfg: SFTRootConfig) -> None:
    t, tasks = cfg.trainer, cfg.hybrid.tasks
    if t.algorithm != "hybrid":
        if tasks or t.task_weights:
            raise ConfigError("hybrid.tasks / trainer.task_weights: only used with trainer.algorithm=hybrid")
        return
    if len(tasks) < 1:
        raise ConfigError("hybrid.tasks: trainer.algorithm=hybrid needs at least one task stream")
    if t.task_weights and len(t.task_weights) != len(tasks):
        raise ConfigError(f"trainer.task_weights: {len(t.task_weights)} weights for {len(tasks)} hybrid.tasks")
    if t.task_weights and (min(t.task_weights) < 0 or sum(t.task_weights) <= 0):
        raise ConfigError("trainer.task_weights: weights must be >= 0 with a positive sum")
    names = [x.name for x in tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"hybrid.tasks: task names must be unique, got {names}")
    for i, x in enumerate(tasks):
        where = f"hybrid.tasks[{i}]"
        if x.loss not in HYBRID_LOSSES:
            raise ConfigError(f"{where}.loss: must be one of {HYBRID_LOSSES}, got {x.loss!r}")
        if not x.train_files:
            raise ConfigError(f"{where}.train_files: each task stream needs its own data files")
        if x.batch_size < 1:
            raise ConfigError(f"{where}.batch_size: must be >= 1")
        if x.loss == "rl" and x.rollout_n < 2:
            raise ConfigError(f"{where}.rollout_n: GRPO needs at least 2 responses per prompt")


def read_yaml_tree(path: str | Path) -> dict[str, Any]:
    """A config file's tree (interpolations unresolved).

    Raises:
        ConfigError: the file is missing, is not YAML, or its top level is not a mapping.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"config '{path}' not found")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(p), resolve=False)
    except Exception as e:  # yaml errors
        raise ConfigError(f"{p}: cannot parse YAML: {' '.join(str(e).split())}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of config sections")
    return loaded  # type: ignore[return-value]


def load_sft_config(path: str | Path | None = None, overrides: Sequence[str] = (), algorithm: str | None = None) -> SFTRootConfig:
    """Load, override, type-check and validate a supervised-trainer config.

    Args:
        path: YAML file, or None for the schema defaults.
        overrides: Hydra-grammar overrides, e.g. ``["optim.lr=1e-4", "+data.response_dict_keys=[answer]"]``.
        algorithm: default ``trainer.algorithm`` when neither the file nor the overrides set it
            (``verl dpo`` passes ``"dpo"``).

    Returns:
        The validated `SFTRootConfig` (interpolations resolved).

    Raises:
        ConfigError: unknown key, wrong type, bad value or unsupported setting (one line).
    """
    tree: dict[str, Any] = {}
    if path is not None:
        tree = read_yaml_tree(path)
        if "experiment_name" not in (tree.get("trainer") or {}):
            tree.setdefault("trainer", {})["experiment_name"] = Path(path).expanduser().stem
    tree, overrides = _from_engine_layout(tree, overrides, algorithm)
    if algorithm and "algorithm" not in (tree.get("trainer") or {}):
        tree.setdefault("trainer", {})["algorithm"] = algorithm
    tree = apply_tree_overrides(tree, overrides)
    _check_keys(tree, SFTRootConfig, "")
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SFTRootConfig), tree))
    except OmegaConfBaseException as e:
        key = str(getattr(e, "full_key", "") or "")
        raise ConfigError(f"{key or 'config'}: {str(getattr(e, 'msg', e)).splitlines()[0]}") from None
    assert isinstance(cfg, SFTRootConfig)
    if cfg.trainer.algorithm == "hybrid":
        ignored = [f"data.{k}" for k in ("train_files", "val_files", "train_batch_size") if k in (tree.get("data") or {})]
        if ignored:
            raise ConfigError(f"{ignored[0]} is not used with trainer.algorithm=hybrid: each hybrid.tasks entry has its own "
                              "train_files and batch_size (validation is not supported yet in hybrid mode)")
    if cfg.trainer.resume_path and cfg.trainer.resume_mode == "auto":
        cfg.trainer.resume_mode, cfg.trainer.resume_from_path = "resume_path", cfg.trainer.resume_path
    _check(cfg)
    return cfg


def _from_engine_layout(tree: dict[str, Any], overrides: Sequence[str], algorithm: str | None) -> tuple[dict[str, Any], Sequence[str]]:
    """A config in verl's ``sft_trainer_engine`` layout as this schema's tree (`verl.config.sft_engine_layout`)."""
    from verl.config.sft_engine_layout import engine_layout_tree, uses_engine_layout

    if not uses_engine_layout(tree, overrides):
        return tree, overrides
    if algorithm not in (None, "sft"):
        raise ConfigError(f"verl's sft_trainer_engine layout (model.path, data.messages_key, engine.*) trains SFT only; "
                          f"write the {algorithm} config with the fsdp_sft_trainer keys (model.partial_pretrain, ...)")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return engine_layout_tree(tree, overrides, device, apply_tree_overrides), []


def sft_config_to_yaml(cfg: SFTRootConfig) -> str:
    """The resolved config as YAML (saved beside every run)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
