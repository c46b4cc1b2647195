"""Loading the supervised trainers' config (`verl.config.sft_schema`): YAML + overrides -> checked dataclasses.

The shared pipeline (`verl.config.pipeline`) with :data:`SFT_LAYOUT`: the same YAML reader,
``defaults:`` lists and presets (``verl/config/presets/sft``), override applier (``a.b=c``,
``+a.b=c``, ``++a.b=c``, ``~a.b``, ``~a.b=c``) and unknown-key walker as ``verl train``; then
this schema's value rules (`verl.config.sft_checks`, `Rule` tables as the RL schema's), every
failure a one-line `ConfigError` naming the dotted key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from verl.config.errors import ConfigError
from verl.config.introspect import check_tree
from verl.config.overrides import apply_overrides
from verl.config.pipeline import PRESET_DIR, Layout, read_config, structured
from verl.config.sft_checks import check_sft
from verl.config.sft_schema import SFTRootConfig

__all__ = ["SFT_LAYOUT", "load_sft_config", "sft_config_to_yaml"]

SFT_LAYOUT = Layout(root=SFTRootConfig, name="verl sft", preset_dir=PRESET_DIR / "sft")
"""``verl sft`` / ``verl dpo`` in the shared pipeline; presets in ``verl/config/presets/sft``."""


def load_sft_config(
    path: str | Path | None = None, overrides: Sequence[str] = (), algorithm: str | None = None
) -> SFTRootConfig:
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
    tree = read_config(path, SFT_LAYOUT)[0] if path is not None else {}
    tree, overrides = _from_engine_layout(tree, overrides, algorithm)
    if algorithm and "algorithm" not in (tree.get("trainer") or {}):
        tree.setdefault("trainer", {})["algorithm"] = algorithm
    tree = apply_overrides(tree, overrides, root=SFTRootConfig)
    check_tree(tree, SFTRootConfig)
    cfg = structured(SFTRootConfig, tree)
    assert isinstance(cfg, SFTRootConfig)
    if cfg.trainer.algorithm == "hybrid":
        ignored = [
            f"data.{k}" for k in ("train_files", "val_files", "train_batch_size") if k in (tree.get("data") or {})
        ]
        if ignored:
            raise ConfigError(
                f"{ignored[0]} is not used with trainer.algorithm=hybrid: each hybrid.tasks entry has its own "
                "train_files and batch_size (validation is not supported yet in hybrid mode)"
            )
    if cfg.trainer.resume_path and cfg.trainer.resume_mode == "auto":
        cfg.trainer.resume_mode, cfg.trainer.resume_from_path = "resume_path", cfg.trainer.resume_path
    check_sft(cfg)
    return cfg


def _from_engine_layout(
    tree: dict[str, Any], overrides: Sequence[str], algorithm: str | None
) -> tuple[dict[str, Any], Sequence[str]]:
    """A config in verl's ``sft_trainer_engine`` layout as this schema's tree (`verl.config.sft_engine_layout`)."""
    from verl.config.sft_engine_layout import engine_layout_tree, uses_engine_layout

    if not uses_engine_layout(tree, overrides):
        return tree, overrides
    if algorithm not in (None, "sft"):
        raise ConfigError(
            f"verl's sft_trainer_engine layout (model.path, data.messages_key, engine.*) trains SFT only; "
            f"write the {algorithm} config with the fsdp_sft_trainer keys (model.partial_pretrain, ...)"
        )
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return engine_layout_tree(tree, overrides, device), []


def sft_config_to_yaml(cfg: SFTRootConfig) -> str:
    """The resolved config as YAML (saved beside every run)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
