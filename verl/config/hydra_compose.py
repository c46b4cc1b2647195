"""verl's Hydra config layout, composed with Hydra itself.

verl's ``ppo_trainer.yaml`` is not a flat file: its ``defaults:`` list pulls config groups
(``actor@actor_rollout_ref.actor: ${model_engine}_actor``, ``reward@reward: reward``, ...) from
the folder it lives in. A verl user runs it with ``--config-path <verl>/verl/trainer/config
--config-name ppo_trainer``, or writes a file whose ``defaults:`` starts from ``ppo_trainer``
(found through ``--config-path`` or the file's ``hydra.searchpath``). Composition is Hydra's own
``compose`` API with the file's folder as the primary config directory, so group packages,
interpolated option names and ``_self_`` ordering behave exactly as in verl.

Command-line overrides are split: one whose key is a config group of that folder
(``model_engine=megatron``, ``actor@actor_rollout_ref.actor=dp_actor``) selects a group option
and goes to Hydra; every other one is a value override applied afterwards by
:mod:`verl.config.overrides` (so unknown keys get the product's did-you-mean messages).

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl.config.errors import ConfigError

__all__ = ["BaseConfigNotFound", "compose_file", "group_names", "needs_hydra", "split_group_overrides"]

VERL_BASE = "ppo_trainer"
"""The name of verl's base PPO config in its config folder."""


class BaseConfigNotFound(ConfigError):
    """verl's ``ppo_trainer`` is not on Hydra's search path (the loader may fall back to the
    schema defaults, which hold verl's values, for a file whose defaults are plain names)."""


def needs_hydra(raw: dict[str, Any]) -> bool:
    """True when a document's ``defaults`` uses Hydra config groups or names verl's ``ppo_trainer``.

    Args:
        raw: The document's top-level mapping (not modified).
    """
    defaults = raw.get("defaults")
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, list):
        return False
    return any(isinstance(e, dict) or (isinstance(e, str) and e.removesuffix(".yaml") == VERL_BASE) for e in defaults)


def group_names(config_dir: Path) -> set[str]:
    """Config groups of a Hydra config folder: its sub-folders holding YAML files."""
    if not config_dir.is_dir():
        return set()
    return {p.name for p in config_dir.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}


def split_group_overrides(overrides: Sequence[str], groups: set[str]) -> tuple[list[str], list[str]]:
    """Splits command-line overrides into (Hydra group selections, value overrides).

    A group selection is ``[+~]group[@package]=option`` where ``group`` is one of ``groups``.
    """
    selections: list[str] = []
    values: list[str] = []
    for text in overrides:
        key = text.partition("=")[0].lstrip("+~").strip()
        group = key.partition("@")[0]
        (selections if group in groups else values).append(text)
    return selections, values


def _hydra_message(e: Exception) -> str:
    text = " ".join(str(e).split())
    return text.split(" See https://", 1)[0]


def compose_file(path: Path, group_overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Cached :func:`_compose_file` (keyed by the file, its folder's modification time and the
    group selections); returns a fresh copy each call."""
    import copy

    resolved = path.resolve()
    key = (str(resolved), tuple(group_overrides), resolved.stat().st_mtime_ns, resolved.parent.stat().st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = _compose_file(resolved, group_overrides)
    return copy.deepcopy(_CACHE[key])


_CACHE: dict[tuple[Any, ...], dict[str, Any]] = {}


def _compose_file(path: Path, group_overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Composes a config file of verl's layout with Hydra.

    Args:
        path: The primary config (``<config-path>/<config-name>.yaml``); its folder is Hydra's
            primary config directory, and its own ``hydra.searchpath`` (if any) is honoured.
        group_overrides: Group selections (see :func:`split_group_overrides`).

    Returns:
        The composed values as a plain nested dict, interpolations unresolved, without Hydra's
        own ``hydra`` node.

    Raises:
        ConfigError: Hydra cannot compose it (a missing group option, ``ppo_trainer`` not on
            the search path, a bad defaults list), as one line.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config_dir = str(path.parent.resolve())
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            composed = compose(config_name=path.stem, overrides=list(group_overrides))
    except (HydraException, OmegaConfBaseException) as e:
        message = _hydra_message(e)
        if isinstance(e, MissingConfigException) and f"'{VERL_BASE}'" in message.split("Config search path")[0]:
            raise BaseConfigNotFound(
                f"{path}: cannot compose the Hydra defaults: {VERL_BASE} not found (verl's {VERL_BASE}.yaml must be on "
                "Hydra's search path: pass --config-path <verl checkout>/verl/trainer/config, or add "
                "file://<verl checkout>/verl/trainer/config to the file's hydra.searchpath)"
            ) from None
        raise ConfigError(
            f"{path}: cannot compose the Hydra defaults: {message.split(' Config search path')[0]}"
        ) from None
    tree = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(tree, dict)
    tree.pop("hydra", None)
    return tree  # type: ignore[return-value]
