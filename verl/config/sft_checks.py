"""Value rules of the supervised trainers' config (`verl.config.sft_schema`), in the RL rule style.

Each section's constraints are a `verl.config.checks.Rule` table keyed by its dataclass
(:data:`SFT_SECTION_RULES`, applied by `verl.config.checks.check_sections`); "not supported yet"
settings are rules of that table too (`unsupported`); rules that span fields or sections are the
functions below. Every failure is one `ConfigError` line naming the dotted key.
"""

from __future__ import annotations

from typing import Any

from verl.config import sft_schema as T
from verl.config.checks import Rule, check_sections, ge, gt, one_of, unsupported, within
from verl.config.errors import ConfigError

__all__ = ["ALGORITHMS", "CHECKPOINT_CONTENTS", "HYBRID_LOSSES", "SFT_SECTION_CHECKS", "SFT_SECTION_RULES", "check_sft"]

ALGORITHMS = frozenset({"sft", "dpo", "hybrid"})
HYBRID_LOSSES = frozenset({"sft", "dpo", "rl"})
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")
_DTYPES = frozenset({"fp32", "bf16", "float32", "bfloat16"})


def _freq(name: str) -> Rule:
    return Rule(
        name,
        lambda v: v == "after_each_epoch" or (isinstance(v, int) and not isinstance(v, bool)),
        "must be an integer or after_each_epoch",
    )


def _contents(name: str) -> list[Rule]:
    return [
        Rule(
            name,
            lambda v: all(x in CHECKPOINT_CONTENTS for x in v),
            f"entries must be in {', '.join(CHECKPOINT_CONTENTS)}",
            frozenset(CHECKPOINT_CONTENTS),
        ),
        unsupported(
            name,
            lambda v: "model" in v,
            "the weights are what a resume starts from; add model",
            what=f"`checkpoint.{name}` without model",
        ),
    ]


SFT_SECTION_RULES: dict[type, list[Rule]] = {
    T.SFTDataConfig: [
        one_of("truncation", frozenset({"error", "left", "right"})),
        ge("train_batch_size", 1),
        ge("micro_batch_size_per_gpu", 1),
        ge("max_length", 2),
        ge("max_token_len_per_gpu", 1),
        unsupported(
            "balance_dp_token", lambda v: not v, "the loss already divides by the global token count, leave it false"
        ),
    ],
    T.CustomClsConfig: [
        unsupported(
            "path",
            lambda v: v is None,
            "convert the data to parquet/jsonl with prompt/response columns",
            what="`data.custom_cls`",
        ),
    ],
    T.SFTModelConfig: [
        one_of("strategy", frozenset({"fsdp", "fsdp2"})),
        ge("lora_rank", 0),
        unsupported("use_liger", lambda v: not v, "set it to false"),
    ],
    T.SFTFSDPConfig: [
        one_of("model_dtype", _DTYPES),
        one_of("mixed_precision", _DTYPES),
        unsupported(
            "wrap_policy",
            lambda v: v.get("min_num_params", 0) == 0,
            "FSDP2 wraps every transformer block; use 0",
            what="`model.fsdp_config.wrap_policy.min_num_params`",
        ),
    ],
    T.SFTOptimConfig: [
        one_of("lr_scheduler", frozenset({"cosine", "constant"})),
        gt("lr", 0.0),
        gt("clip_grad", 0.0),
        within("warmup_steps_ratio", 0.0, 1.0),
    ],
    T.DPOConfig: [
        one_of("loss_type", frozenset({"sigmoid", "ipo"})),
        gt("beta", 0.0),
        within("label_smoothing", 0.0, 0.5, hi_open=True),
        one_of("reference", frozenset({"auto", "copy"})),
    ],
    T.SFTTrainerConfig: [
        one_of("algorithm", ALGORITHMS),
        one_of("resume_mode", frozenset({"auto", "disable", "resume_path"})),
        one_of("device", frozenset({"cpu", "cuda"})),
        unsupported("default_hdfs_dir", lambda v: False, "set it to null and copy default_local_dir yourself"),
        _freq("save_freq"),
        _freq("test_freq"),
    ],
    T.SFTCheckpointConfig: [*_contents("save_contents"), *_contents("load_contents")],
    T.SFTRootConfig: [ge("ulysses_sequence_parallel_size", 1)],
}
"""Per-section rules, keyed by the section's dataclass (a None value is never checked)."""


def _check_dpo(p: T.DPOConfig, prefix: str) -> None:
    if p.loss_type != "sigmoid" and p.label_smoothing != 0:
        raise ConfigError(f"{prefix}.label_smoothing: applies to loss_type=sigmoid only, got loss_type={p.loss_type!r}")


SFT_SECTION_CHECKS: dict[type, Any] = {T.DPOConfig: _check_dpo}
"""Cross-field rules inside one section, keyed by the section's dataclass."""


def _check_sequence_parallel(cfg: T.SFTRootConfig) -> None:
    sp = cfg.ulysses_sequence_parallel_size
    if sp > 1 and not cfg.use_remove_padding:
        raise ConfigError(
            f"ulysses_sequence_parallel_size={sp} needs use_remove_padding=true: "
            "sequence parallelism splits packed (padding-free) sequences"
        )
    if sp > 1 and cfg.trainer.algorithm != "sft":
        raise ConfigError(
            f"ulysses_sequence_parallel_size with trainer.algorithm={cfg.trainer.algorithm} is not "
            "supported yet: use 1 (sft only)"
        )


def _check_hybrid(cfg: T.SFTRootConfig) -> None:
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
            raise ConfigError(f"{where}.loss: must be one of {', '.join(sorted(HYBRID_LOSSES))}, got {x.loss!r}")
        if not x.train_files:
            raise ConfigError(f"{where}.train_files: each task stream needs its own data files")
        if x.batch_size < 1:
            raise ConfigError(f"{where}.batch_size: must be >= 1")
        if x.loss == "rl" and x.rollout_n < 2:
            raise ConfigError(f"{where}.rollout_n: GRPO needs at least 2 responses per prompt")
        if x.loss == "rl" and x.logprob_chunk_size < 1:
            raise ConfigError(f"{where}.logprob_chunk_size: must be >= 1, got {x.logprob_chunk_size}")
        if x.loss == "rl" and x.reward_timeout_s <= 0:
            raise ConfigError(f"{where}.reward_timeout_s: must be > 0 seconds, got {x.reward_timeout_s}")


def check_sft(cfg: T.SFTRootConfig) -> None:
    """Every rule of a loaded SFT / DPO / hybrid config: the section tables, then the cross-section rules.

    Raises:
        ConfigError: the first violated rule, naming the dotted key.
    """
    check_sections(cfg, rules=SFT_SECTION_RULES, checks=SFT_SECTION_CHECKS)
    _check_sequence_parallel(cfg)
    _check_hybrid(cfg)
