"""Loading a config: YAML files and presets, overrides, type checks, finalize, validation.

The steps every command shares (the YAML reader, ``defaults:`` lists and presets, the override
applier, the unknown-key walker, type errors) are :mod:`verl.config.pipeline`'s, run here with
:data:`RL_LAYOUT`; this module adds the RL-only steps (Hydra composition of verl's layout, seed
and verl layout translation, finalize, consistency, verl keys).

``load_config(path, overrides)`` runs, in order:

1. **compose** — read the YAML file, or the preset of that name in ``verl/config/presets/``. A
   file may build on others with a Hydra-style ``defaults`` list (``defaults: [gsm8k_grpo]`` or
   ``defaults: [../base.yaml, _self_]``): each entry is a preset name or a YAML path relative to
   the including file, merged in order, and the file's own keys are merged last (``_self_`` is
   accepted and has no other effect). A file in verl's Hydra layout — group entries
   (``- actor@actor_rollout_ref.actor: ${model_engine}_actor``) or ``ppo_trainer`` found in its
   folder or ``hydra.searchpath`` — is composed by Hydra itself (:mod:`verl.config.hydra_compose`;
   group selections among the overrides, ``model_engine=...``, go to Hydra); a file whose
   ``ppo_trainer`` is on no search path keeps the built-in meaning (the schema defaults, which
   are verl's values). Each document in the seed layout is translated first
   (:mod:`verl.config.compat.seed_layout`); verl's current layout (``_target_`` markers, ``reward.*``,
   ``critic.fsdp``, verl's ``null`` placeholders) is normalised after the overrides
   (:mod:`verl.config.compat.verl_layout`).
2. **overrides** — Hydra-grammar ``a.b=c``, ``+a.b=c``, ``~a.b`` (:mod:`verl.config.overrides`).
   Then verl's keys that have no effect here (not schema fields) are checked against the compat
   table and removed (:mod:`verl.config.compat.verl_inert`): accepted at verl's default, or at any
   value for a documented no-op; otherwise "`<key>` is not supported yet: ...".
3. **keys** — unknown keys are rejected with a did-you-mean; a scalar for a list-of-strings field
   becomes a one-element list (:func:`verl.config.introspect.check_tree`).
4. **types** — merged onto ``OmegaConf.structured(RootConfig)``; ``OmegaConf.to_object``
   converts and type-checks every value and resolves ``${...}`` interpolations.
5. **section checks** — ranges and allowed names (:mod:`verl.config.checks`).
6. **finalize** — derived values (:mod:`verl.config.finalize`).
7. **consistency** — cross-section rules: batch sizes, estimator vs critic, lengths, devices
   (:mod:`verl.config.consistency`).
8. **verl keys** — a value of a schema key that cannot take effect here (an engine key the ``hf``
   engine cannot honour, a conditional key outside its range) is refused with "`<key>` is not
   supported yet: ..." (:mod:`verl.config.compat.verl_keys`); a key another part
   of the product is adding gives the same error instead of "unknown key"; the module named
   in ``actor_rollout_ref.model.external_lib`` is imported before names are checked (it may
   register advantage estimators / policy losses).

Every failure is a :class:`ConfigError` with a one-line message naming the full dotted key.
Nothing here imports torch, so loading and ``verl config show`` stay fast.
"""

from __future__ import annotations

import dataclasses

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.config.checks import check_sections
from verl.config.consistency import check_consistency
from verl.config.errors import ConfigError
from verl.config.finalize import finalize
from verl.config.compat.verl_keys import check_compat, check_unknown_owned, import_external_lib
from verl.config.introspect import check_tree, key_kind
from verl.config.overrides import apply_overrides
from verl.config.pipeline import PRESET_DIR, Layout, compose, name_experiment, read_yaml, resolve_config, type_error
from verl.config.pipeline import list_presets as pipeline_list_presets
from verl.config.schema import RootConfig
from verl.config.compat.seed_layout import translate_override, translate_seed_layout
from verl.config.hydra_compose import BaseConfigNotFound, compose_file, group_names, needs_hydra, split_group_overrides
from verl.config.compat.verl_inert import strip_verl_keys, verl_defaults
from verl.config.compat.verl_layout import normalize_verl_tree, translate_layout_override

__all__ = [
    "PRESET_DIR",
    "RL_LAYOUT",
    "config_from_dict",
    "config_to_yaml",
    "list_presets",
    "load_config",
    "save_config",
    "validate",
]

VERL_BASE_CONFIGS = frozenset({"ppo_trainer"})
"""``defaults`` entries naming verl's own base config: the schema defaults (verl's values) are it."""


def _translate_override(key: str, value: Any) -> dict[str, Any] | None:
    return translate_layout_override(key, value) or translate_override(key, value)


RL_LAYOUT = Layout(
    root=RootConfig,
    name="verl train",
    preset_dir=PRESET_DIR,
    base_configs=VERL_BASE_CONFIGS,
    translate_document=translate_seed_layout,
    translate_override=_translate_override,
    owned=check_unknown_owned,
    hydra_searchpath=True,
)
"""The RL config (``verl train``, ``verl config show``, the seed API) in the shared pipeline."""


def list_presets() -> list[str]:
    """Names of the built-in RL presets (file stems in :data:`PRESET_DIR`), sorted."""
    return pipeline_list_presets(PRESET_DIR)


def _compose(raw: dict[str, Any], base_dir: Path | None, where: str, seen: tuple[Path, ...]) -> dict[str, Any]:
    """Merges a document's ``defaults`` (recursively) under its own translated keys."""
    return compose(raw, RL_LAYOUT, base_dir, where, seen)


def _compose_top(raw: dict[str, Any], path: Path, overrides: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """A file in verl's Hydra layout (group defaults, or ``ppo_trainer`` found on the search path)
    is composed by Hydra (:mod:`verl.config.hydra_compose`), group selections among the
    overrides going to Hydra; any other file by :func:`_compose`. A file whose defaults are
    plain names and whose ``ppo_trainer`` is not on a search path keeps the built-in meaning
    (``ppo_trainer`` = the schema defaults, which are verl's values)."""
    if needs_hydra(raw):
        groups = group_names(path.parent)
        for entry in (raw.get("hydra") or {}).get("searchpath") or []:
            if isinstance(entry, str) and entry.startswith("file://"):
                groups |= group_names(Path(entry.removeprefix("file://")).expanduser())
        selections, values = split_group_overrides(overrides, groups)
        plain = all(isinstance(e, str) for e in (raw.get("defaults") or []))
        try:
            return compose_file(path, selections), values
        except BaseConfigNotFound:
            if not plain:
                raise
    return _compose(raw, path.parent, str(path), (path,)), list(overrides)


def _build(tree: dict[str, Any], overrides: Sequence[str]) -> RootConfig:
    tree = apply_overrides(tree, overrides, translate=_translate_override, root=RootConfig, owned=check_unknown_owned)
    normalize_verl_tree(tree)
    strip_verl_keys(tree)
    check_unknown_owned(tree, key_kind)
    check_tree(tree)
    import_external_lib(tree)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RootConfig), tree)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise type_error(e, tree, RootConfig) from None
    assert isinstance(cfg, RootConfig)
    check_sections(cfg)
    cfg = finalize(cfg)
    check_consistency(cfg)
    check_compat(cfg)
    attach_root(cfg)
    return cfg


def attach_root(cfg: RootConfig) -> None:
    """Give each top-level section a ``_root`` back-reference (not a config field).

    The seed API passes sections around (``RLTrainer(config=config.trainer, ...)``,
    ``RLDataLoader(config.data)``); the back-reference lets them reach the rest of the run's
    config (e.g. the model path a tokenizer comes from) without a second argument.
    """
    for f in dataclasses.fields(cfg):
        object.__setattr__(getattr(cfg, f.name), "_root", cfg)


def load_config(path: str | os.PathLike[str] | None = None, overrides: Sequence[str] = ()) -> RootConfig:
    """Loads, overrides, type-checks, finalizes and validates a config.

    Args:
        path: A YAML file, the name of a built-in preset (``"quickstart"``, ``"gsm8k_grpo"``,
            see :func:`list_presets`), or None for the schema defaults. Files may be in the
            canonical or the seed layout. A file that sets no ``trainer.experiment_name`` gets
            its file name (stem), so different configs never share output or checkpoint
            directories (``trainer.output_dir`` / ``default_local_dir`` default to
            ``.../<project_name>/<experiment_name>``).
        overrides: Hydra-grammar overrides applied on top, e.g.
            ``["actor_rollout_ref.actor.optim.lr=1e-6", "+actor_rollout_ref.model.override_config.x=1"]``.

    Returns:
        The finalized ``RootConfig`` (plain dataclasses; interpolations resolved).

    Raises:
        ConfigError: Any invalid key, type, value or combination (one-line message).

    Example:
        >>> cfg = load_config("gsm8k_grpo", ["data.train_batch_size=32"])
        >>> cfg.algorithm.adv_estimator
        'grpo'
    """
    if path is None:
        return _build({}, overrides)
    resolved = resolve_config(path, None, PRESET_DIR)
    raw = read_yaml(resolved)
    tree, overrides = _compose_top(raw, resolved, overrides)
    name_experiment(tree, raw, resolved, RL_LAYOUT)
    return _build(tree, overrides)


def config_from_dict(d: dict[str, Any], overrides: Sequence[str] = ()) -> RootConfig:
    """Builds a config from a nested dict (canonical or seed layout), e.g. ``create_trainer``'s.

    The dict may hold a ``defaults`` list like a YAML file (paths relative to the working
    directory).

    Args:
        d: Config values; not modified.
        overrides: Hydra-grammar overrides applied on top.

    Returns:
        The finalized, validated ``RootConfig``.

    Raises:
        ConfigError: As :func:`load_config`.
    """
    if not isinstance(d, dict):
        raise ConfigError(f"config: expected a mapping of config sections, got {type(d).__name__}")
    try:
        tree = _compose(d, None, "config", ())
    except OmegaConfBaseException as e:  # values OmegaConf cannot hold (arbitrary objects)
        raise ConfigError(f"config: unsupported value: {str(e).splitlines()[0]}") from None
    return _build(tree, overrides)


def validate(cfg: RootConfig) -> None:
    """Re-checks a finalized config built in code (e.g. after editing fields of a loaded one).

    Args:
        cfg: A finalized ``RootConfig`` (see :func:`verl.config.finalize.finalize`).

    Raises:
        ConfigError: The first violated rule.
    """
    check_sections(cfg)
    check_consistency(cfg)
    check_compat(cfg)


def config_to_yaml(cfg: RootConfig, verl_keys: bool = False) -> str:
    """The config as YAML, every key included; ``load_config`` of it gives an equal config.

    Args:
        cfg: The config.
        verl_keys: Also verl's keys that have no effect here (not schema fields), at verl's
            defaults, in their sections (`verl.config.compat.verl_inert`): the file verl's own
            loader expects; it loads here to the same config.
    """
    node = OmegaConf.structured(cfg)
    if verl_keys:
        node = OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(node, resolve=False)), verl_defaults())
    return OmegaConf.to_yaml(node)


def save_config(cfg: RootConfig, path: str | os.PathLike[str]) -> Path:
    """Writes the resolved config as YAML (parents created); the trainer saves it beside run outputs.

    Args:
        cfg: The config to save.
        path: Destination file, e.g. ``<trainer.output_dir>/config.yaml``.

    Returns:
        The path written.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(config_to_yaml(cfg), encoding="utf-8")
    return out
