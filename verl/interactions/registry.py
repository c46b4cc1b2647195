"""Loading interactions from verl's interaction config file (``multi_turn.interaction_config_path``).

The file is verl's YAML format::

    interaction:
      - name: gsm8k                                                     # optional
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
        config: {}

Without ``name``, the class name minus an ``Interaction`` suffix, lower-cased, is the name
(``Gsm8kInteraction`` → ``gsm8k``), as in verl; the name is also put into the config as
``config["name"]``. A row picks its interaction with ``extra_info.interaction_kwargs.name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.tools.base import BaseInteraction
from verl.tools.registry import ToolConfigError, _load_yaml, import_class

__all__ = ["load_interactions", "select_interaction"]

_SUFFIX = "Interaction"


def _default_name(class_name: str) -> str:
    simple = class_name.rsplit(".", 1)[-1]
    return (simple[: -len(_SUFFIX)] if simple.endswith(_SUFFIX) and simple != _SUFFIX else simple).lower()


def _build(entry: Any, where: str) -> BaseInteraction:
    if not isinstance(entry, dict) or "class_name" not in entry:
        raise ToolConfigError(f"{where}: each entry needs class_name (and optional name, config)")
    unknown = sorted(set(entry) - {"name", "class_name", "config"})
    if unknown:
        raise ToolConfigError(f"{where}: unknown key(s) {unknown}; allowed: name, class_name, config")
    where = f"{where} ({entry['class_name']})"
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ToolConfigError(f"{where}: config must be a mapping")
    name = entry.get("name") or _default_name(entry["class_name"])
    if not isinstance(name, str):
        raise ToolConfigError(f"{where}: name must be a string")
    cls = import_class(entry["class_name"], BaseInteraction, where)
    try:
        return cls(config={**config, "name": name})
    except Exception as e:  # the interaction's own config check, with where it came from
        raise ToolConfigError(f"{where}: {type(e).__name__}: {e}") from e


def load_interactions(interaction_config_path: str | Path) -> dict[str, BaseInteraction]:
    """Builds every interaction of a verl interaction config file.

    Args:
        interaction_config_path: the YAML file.

    Returns:
        ``{name: interaction}`` in file order.

    Raises:
        ToolConfigError: one line naming the file and entry (``interaction[i]``): missing file,
            bad YAML, no ``interaction`` list, unknown keys, bad class, config error, duplicate name.
    """
    out: dict[str, BaseInteraction] = {}
    for i, entry in enumerate(_load_yaml(interaction_config_path, "interaction")):
        where = f"{interaction_config_path}: interaction[{i}]"
        interaction = _build(entry, where)
        if interaction.name in out:
            raise ToolConfigError(f"{where}: duplicate interaction name {interaction.name!r}")
        out[interaction.name] = interaction
    return out


def select_interaction(
    interactions: dict[str, BaseInteraction], interaction_kwargs: dict[str, Any] | None
) -> BaseInteraction:
    """The interaction a row asks for with ``interaction_kwargs["name"]``.

    A row without a name gets the only configured interaction.

    Raises:
        ValueError: no interactions configured, an unknown name, or no name with several configured.
    """
    if not interactions:
        raise ValueError(
            "the row has interaction_kwargs but no interaction is configured (multi_turn.interaction_config_path)"
        )
    name = (interaction_kwargs or {}).get("name")
    if name is None:
        if len(interactions) == 1:
            return next(iter(interactions.values()))
        raise ValueError(
            f"interaction_kwargs has no 'name' and several interactions are configured: {sorted(interactions)}"
        )
    if name not in interactions:
        raise ValueError(f"interaction_kwargs.name={name!r} is not configured; configured: {sorted(interactions)}")
    return interactions[name]
