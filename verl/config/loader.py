"""Loading a config: YAML files and presets, overrides, type checks, finalize, validation.

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
   (:mod:`verl.config.compat`); verl's current layout (``_target_`` markers, ``reward.*``,
   ``critic.fsdp``, verl's ``null`` placeholders) is normalised after the overrides
   (:mod:`verl.config.verl_layout`).
2. **overrides** — Hydra-grammar ``a.b=c``, ``+a.b=c``, ``~a.b`` (:mod:`verl.config.overrides`).
3. **keys** — unknown keys are rejected with a did-you-mean; a scalar for a list-of-strings field
   becomes a one-element list (:func:`verl.config.introspect.check_tree`).
4. **types** — merged onto ``OmegaConf.structured(RootConfig)``; ``OmegaConf.to_object``
   converts and type-checks every value and resolves ``${...}`` interpolations.
5. **section checks** — ranges and allowed names (:mod:`verl.config.checks`).
6. **finalize** — derived values (:mod:`verl.config.finalize`).
7. **consistency** — cross-section rules: batch sizes, estimator vs critic, lengths, devices
   (:mod:`verl.config.consistency`).
8. **verl keys** — every key of verl's reference config that cannot take effect here is refused
   with "`<key>` is not supported yet: ..." (:mod:`verl.config.verl_keys`); a key another part
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
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from verl.config._tree import get_path, merge_trees
from verl.config.checks import check_sections
from verl.config.consistency import check_consistency
from verl.config.errors import ConfigError, did_you_mean
from verl.config.finalize import finalize
from verl.config.verl_keys import check_compat, check_unknown_owned, import_external_lib
from verl.config.introspect import check_tree, key_kind, type_at, type_name
from verl.config.overrides import apply_overrides
from verl.config.schema import RootConfig
from verl.config.compat import translate_override, translate_seed_layout
from verl.config.hydra_compose import BaseConfigNotFound, compose_file, group_names, needs_hydra, split_group_overrides
from verl.config.verl_layout import normalize_verl_tree, translate_layout_override

__all__ = [
    "PRESET_DIR",
    "config_from_dict",
    "config_to_yaml",
    "list_presets",
    "load_config",
    "save_config",
    "validate",
]

PRESET_DIR = Path(__file__).resolve().parent / "presets"
"""Folder of the built-in presets; ``load_config("gsm8k_grpo")`` reads ``gsm8k_grpo.yaml`` here."""


def list_presets() -> list[str]:
    """Names of the built-in presets (file stems in :data:`PRESET_DIR`), sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _resolve(ref: str | os.PathLike[str], base_dir: Path | None) -> Path:
    """A file path (relative to ``base_dir`` first, then the working directory) or a preset name."""
    path = Path(ref).expanduser()
    candidates = [base_dir / path] if base_dir is not None and not path.is_absolute() else []
    candidates.append(path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    preset = PRESET_DIR / f"{path.name.removesuffix('.yaml')}.yaml"
    if path.parent == Path(".") and preset.is_file():
        return preset
    names = list_presets()
    raise ConfigError(
        f"config '{ref}' not found: no such file and no preset of that name (presets: {', '.join(names)})"
        + did_you_mean(str(ref), names)
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = OmegaConf.load(path)
    except Exception as e:  # yaml.YAMLError and OmegaConf's duplicate-key errors
        raise ConfigError(f"{path}: cannot parse YAML: {e}") from None
    data = OmegaConf.to_container(loaded, resolve=False)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config sections")
    return data  # type: ignore[return-value]


def _default_refs(defaults: Any, where: str) -> list[str]:
    if defaults is None:
        return []
    entries = [defaults] if isinstance(defaults, str) else defaults
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError(
            f"{where}: 'defaults' must be a list of preset names or YAML paths, got {defaults!r} "
            "(Hydra config-group entries are not supported)"
        )
    return [e for e in entries if e != "_self_"]


VERL_BASE_CONFIGS = frozenset({"ppo_trainer"})
"""``defaults`` entries naming verl's own base config: the schema defaults (verl's values) are it."""


def _drop_hydra_section(raw: dict[str, Any], where: str) -> None:
    """A verl recipe's ``hydra: {searchpath: [...]}`` only tells Hydra where ``ppo_trainer`` lives,
    which is built in here; any other Hydra setting is refused rather than ignored."""
    section = raw.pop("hydra", None)
    if section is None:
        return
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: 'hydra' must be a mapping, got {section!r}")
    for key in section:
        if key != "searchpath":
            raise ConfigError(f"`hydra.{key}` is not supported yet: only hydra.searchpath (for verl's "
                              "ppo_trainer defaults, which are built in) is accepted; remove it")


def _compose(raw: dict[str, Any], base_dir: Path | None, where: str, seen: tuple[Path, ...]) -> dict[str, Any]:
    """Merges a document's ``defaults`` (recursively) under its own translated keys."""
    raw = dict(raw)
    _drop_hydra_section(raw, where)
    tree: dict[str, Any] = {}
    for ref in _default_refs(raw.pop("defaults", None), where):
        if ref in VERL_BASE_CONFIGS:
            continue
        path = _resolve(ref, base_dir)
        if path in seen:
            raise ConfigError(f"{where}: 'defaults' includes {path} again (a cycle)")
        tree = merge_trees(tree, _compose(_read_yaml(path), path.parent, str(path), (*seen, path)))
    return merge_trees(tree, translate_seed_layout(raw))


def _compose_top(raw: dict[str, Any], path: Path, overrides: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """A file in verl's Hydra layout (group defaults, or ``ppo_trainer`` found on the search path)
    is composed by Hydra (:mod:`verl.config.hydra_compose`), group selections among the
    overrides going to Hydra; any other file by :func:`_compose`. A file whose defaults are
    plain names and whose ``ppo_trainer`` is not on a search path keeps the built-in meaning
    (``ppo_trainer`` = the schema defaults, which are verl's values)."""
    if needs_hydra(raw):
        groups = group_names(path.parent)
        for entry in ((raw.get("hydra") or {}).get("searchpath") or []):
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


def _type_error(e: OmegaConfBaseException, tree: dict[str, Any]) -> ConfigError:
    key = str(getattr(e, "full_key", "") or "")
    detail = str(getattr(e, "msg", e)).splitlines()[0]
    if not key:
        return ConfigError(f"invalid config: {detail}")
    if isinstance(e, InterpolationResolutionError):
        return ConfigError(f"{key}: {detail}")
    parent, leaf = get_path(tree, key)
    got = parent[leaf] if parent is not None and leaf in parent else getattr(e, "value", None)
    return ConfigError(f"{key}: expected {type_name(type_at(key))}, got {got!r}")


def _build(tree: dict[str, Any], overrides: Sequence[str]) -> RootConfig:
    tree = apply_overrides(tree, overrides, translate=lambda k, v: translate_layout_override(k, v) or translate_override(k, v))
    normalize_verl_tree(tree)
    check_unknown_owned(tree, key_kind)
    check_tree(tree)
    import_external_lib(tree)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RootConfig), tree)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise _type_error(e, tree) from None
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
    resolved = _resolve(path, None)
    raw = _read_yaml(resolved)
    tree, overrides = _compose_top(raw, resolved, overrides)
    # runs of different config files must not share output / checkpoint directories: a file that
    # does not name its experiment itself (a preset it builds on may) is named after the file
    if "experiment_name" not in (raw.get("trainer") or {}):
        tree.setdefault("trainer", {})["experiment_name"] = resolved.stem
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


def config_to_yaml(cfg: RootConfig) -> str:
    """The config as YAML, every key included; ``load_config`` of it gives an equal config."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


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
