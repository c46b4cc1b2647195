"""The one config-loading pipeline every command runs: read, compose, override, check keys, type.

``verl train``, ``verl sft``, ``verl dpo``, ``verl generate`` and ``verl eval`` each describe their
config by a :class:`Layout` (the schema root, the folder of its presets, and the hooks only the
RL layout needs) and load it with :func:`load_tree` and :func:`structured`:

1. **read** — :func:`read_yaml`, the one YAML reader (a missing file, bad YAML or a top level
   that is not a mapping is a one-line `ConfigError`).
2. **compose** — a ``defaults:`` list (``defaults: [gsm8k_grpo]`` or ``[../base.yaml, _self_]``):
   each entry a preset name (a file of the layout's preset folder) or a YAML path relative to
   the including file, merged in order, the file's own keys last (``_self_`` has no other
   effect); cycles are refused. The top-level CONFIG argument may be a preset name too.
3. **overrides** — :func:`verl.config.overrides.apply_overrides`, one meaning of ``key=v``,
   ``+key=v``, ``++key=v``, ``~key`` and ``~key=v`` for every command.
4. **keys** — :func:`verl.config.introspect.check_tree`, the one unknown-key walker (the message
   names the key and the closest valid one).
5. **types** — :func:`structured`: the tree merged onto the dataclass defaults by OmegaConf;
   a wrong type names the dotted key and the expected type.

Value rules (ranges, allowed names, "not supported yet") follow as `verl.config.checks.Rule`
tables and cross-section functions of each command's loader. Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from verl.config._tree import get_path, merge_trees
from verl.config.errors import ConfigError, did_you_mean
from verl.config.introspect import check_tree, type_at, type_name
from verl.config.overrides import apply_overrides

__all__ = ["PRESET_DIR", "Layout", "compose", "list_presets", "load_tree", "read_yaml", "resolve_config", "structured"]

PRESET_DIR = Path(__file__).resolve().parent / "presets"
"""Folder of the built-in presets: RL presets at its top, other layouts' in sub-folders
(``presets/sft``, ``presets/generate``)."""


@dataclass(frozen=True)
class Layout:
    """What one command's config is: its schema root, its presets, and its layout hooks.

    Attributes:
        root: The schema dataclass (``RootConfig``, ``SFTRootConfig``, ...); keys are checked
            against it.
        name: The command, for messages (``"verl sft"``).
        preset_dir: Folder of this layout's presets (``<name>.yaml``); None = no presets.
        base_configs: ``defaults`` entries that name the schema defaults themselves (verl's
            ``ppo_trainer``): skipped.
        translate_document: Each composed document's keys in another layout -> this schema's
            (the RL seed layout, `verl.config.compat.seed_layout.translate_seed_layout`).
        translate_override: ``(key, value)`` of an override in another layout -> this schema's
            values, or None (see `verl.config.overrides.apply_overrides`).
        owned: Unknown keys another part of the product is adding -> "not supported yet".
        verl_keys: Checks and removes verl's keys without effect in this layout's sections before
            the key walk (`verl.config.compat.verl_inert.strip_verl_keys`); they are not schema fields.
        hydra_searchpath: Accept a ``hydra: {searchpath: [...]}`` section (verl's recipes).
        name_experiment: A file that sets no ``trainer.experiment_name`` gets its stem, so runs
            of different files never share output directories.
    """

    root: type
    name: str
    preset_dir: Path | None = None
    base_configs: frozenset[str] = frozenset()
    translate_document: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    translate_override: Callable[[str, Any], dict[str, Any] | None] | None = None
    owned: Callable[[dict[str, Any], Callable[[str], str]], None] | None = None
    verl_keys: Callable[[dict[str, Any]], Any] | None = None
    hydra_searchpath: bool = False
    name_experiment: bool = True


def list_presets(preset_dir: Path | None = PRESET_DIR) -> list[str]:
    """Names of the presets in ``preset_dir`` (file stems), sorted; [] when there is none."""
    return sorted(p.stem for p in preset_dir.glob("*.yaml")) if preset_dir is not None and preset_dir.is_dir() else []


def resolve_config(ref: str | os.PathLike[str], base_dir: Path | None, preset_dir: Path | None) -> Path:
    """A file path (relative to ``base_dir`` first, then the working directory) or a preset name.

    Raises:
        ConfigError: neither a file nor a preset (the message lists the presets and the closest).
    """
    path = Path(ref).expanduser()
    candidates = [base_dir / path] if base_dir is not None and not path.is_absolute() else []
    candidates.append(path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    names = list_presets(preset_dir)
    if preset_dir is not None and path.parent == Path("."):
        preset = preset_dir / f"{path.name.removesuffix('.yaml')}.yaml"
        if preset.is_file():
            return preset
    listed = f"presets: {', '.join(names)}" if names else "this command has no presets"
    raise ConfigError(
        f"config '{ref}' not found: no such file and no preset of that name ({listed})" + did_you_mean(str(ref), names)
    )


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A YAML file's tree, interpolations unresolved: the one YAML reader of every command.

    Raises:
        ConfigError: the file is missing, is not YAML (duplicate keys included), or its top level
            is not a mapping.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"config '{path}' not found")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(p), resolve=False)
    except Exception as e:  # yaml.YAMLError and OmegaConf's duplicate-key errors
        raise ConfigError(f"{p}: cannot parse YAML: {' '.join(str(e).split())}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of config sections")
    return loaded  # type: ignore[return-value]


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


def _drop_hydra_section(raw: dict[str, Any], where: str, layout: Layout) -> None:
    """A verl recipe's ``hydra: {searchpath: [...]}`` only tells Hydra where ``ppo_trainer`` lives,
    which is built in here; any other Hydra setting is refused rather than ignored."""
    if not layout.hydra_searchpath or "hydra" not in raw:
        return
    section = raw.pop("hydra")
    if section is None:
        return
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: 'hydra' must be a mapping, got {section!r}")
    for key in section:
        if key != "searchpath":
            raise ConfigError(
                f"`hydra.{key}` is not supported yet: only hydra.searchpath (for verl's "
                "ppo_trainer defaults, which are built in) is accepted; remove it"
            )


def compose(
    raw: dict[str, Any], layout: Layout, base_dir: Path | None, where: str, seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """Merges a document's ``defaults`` (recursively, in order) under its own keys.

    Args:
        raw: The document (not modified).
        layout: Whose presets and document translation apply.
        base_dir: Folder relative ``defaults`` paths start from (None: the working directory).
        where: The document's name, for messages.
        seen: Files already being composed (a cycle is an error).

    Raises:
        ConfigError: a malformed ``defaults`` list, an entry that is no file and no preset, a cycle.
    """
    raw = dict(raw)
    _drop_hydra_section(raw, where, layout)
    tree: dict[str, Any] = {}
    for ref in _default_refs(raw.pop("defaults", None), where):
        if ref in layout.base_configs:
            continue
        path = resolve_config(ref, base_dir, layout.preset_dir)
        if path in seen:
            raise ConfigError(f"{where}: 'defaults' includes {path} again (a cycle)")
        tree = merge_trees(tree, compose(read_yaml(path), layout, path.parent, str(path), (*seen, path)))
    own = layout.translate_document(raw) if layout.translate_document is not None else raw
    return merge_trees(tree, own)


def read_config(path: str | os.PathLike[str], layout: Layout) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """Reads CONFIG (a file or a preset name of ``layout``): ``(composed tree, raw document, file)``.

    A file that sets no ``trainer.experiment_name`` gets its stem when ``layout.name_experiment``.
    """
    resolved = resolve_config(path, None, layout.preset_dir)
    raw = read_yaml(resolved)
    tree = compose(raw, layout, resolved.parent, str(resolved), (resolved,))
    name_experiment(tree, raw, resolved, layout)
    return tree, raw, resolved


def name_experiment(tree: dict[str, Any], raw: dict[str, Any], path: Path, layout: Layout) -> None:
    """Sets ``trainer.experiment_name`` to the file's stem when the file itself does not name it
    (a preset it builds on may): runs of different files never share output directories."""
    if layout.name_experiment and "experiment_name" not in (raw.get("trainer") or {}):
        tree.setdefault("trainer", {})["experiment_name"] = path.stem


def load_tree(
    layout: Layout,
    path: str | os.PathLike[str] | None,
    overrides: Sequence[str] = (),
    before_overrides: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Steps 1-4 of the module docstring: the checked tree of user values of ``layout``.

    Args:
        layout: The command's layout.
        path: CONFIG (file or preset name), or None for the schema defaults.
        overrides: Hydra-grammar overrides.
        before_overrides: Applied to the composed tree before the overrides (defaults a command
            fills in when neither the file nor the overrides set them).

    Raises:
        ConfigError: see :func:`compose`, `verl.config.overrides.apply_overrides` and
            `verl.config.introspect.check_tree`.
    """
    tree = read_config(path, layout)[0] if path is not None else {}
    if before_overrides is not None:
        tree = before_overrides(tree)
    tree = apply_overrides(tree, overrides, translate=layout.translate_override, root=layout.root, owned=layout.owned)
    if layout.verl_keys is not None:
        layout.verl_keys(tree)
    check_tree(tree, layout.root)
    return tree


def structured(cls: type, tree: dict[str, Any], prefix: str = "") -> Any:
    """``tree`` merged over ``cls``'s defaults and converted (``${...}`` resolved).

    Args:
        cls: The schema dataclass (the root, or a section when ``prefix`` names where it sits).
        tree: Checked user values (:func:`load_tree`).
        prefix: Dotted path of ``cls`` in its command's config, for messages (``"data."``).

    Raises:
        ConfigError: ``<dotted key>: expected <type>, got <value>``, or an interpolation that
            does not resolve.
    """
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), tree))
    except OmegaConfBaseException as e:
        raise type_error(e, tree, cls, prefix) from None


def type_error(e: OmegaConfBaseException, tree: dict[str, Any], root: type, prefix: str = "") -> ConfigError:
    """OmegaConf's merge / conversion error as one line naming the dotted key and expected type."""
    key = str(getattr(e, "full_key", "") or "")
    detail = str(getattr(e, "msg", e)).splitlines()[0]
    if not key:
        return ConfigError(f"{prefix.rstrip('.') or 'config'}: {detail}" if prefix else f"invalid config: {detail}")
    if isinstance(e, InterpolationResolutionError):
        return ConfigError(f"{prefix}{key}: {detail}")
    expected = type_at(key, root)
    if expected is None:
        return ConfigError(f"{prefix}{key}: {detail}")
    parent, leaf = get_path(tree, key)
    got = parent[leaf] if parent is not None and leaf in parent else getattr(e, "value", None)
    return ConfigError(f"{prefix}{key}: expected {type_name(expected)}, got {got!r}")
