"""Command-line overrides in Hydra's grammar, applied to the plain dict of user values.

This is the one override applier of every command (``verl train``, ``sft``, ``dpo``,
``generate``, ``eval``, ``config show``): the schema root it checks keys against is a parameter.

Parsing is Hydra's own (``OverridesParser``), so quoting, lists, dicts, ``null`` and
interpolations behave exactly as in verl's scripts. Semantics here:

- ``a.b=v``: set a key of the schema (or a key inside a free-form mapping such as
  ``actor_rollout_ref.model.override_config``). Mapping values merge into an existing mapping.
- ``+a.b=v`` / ``++a.b=v``: the same (also for a key the schema has, as verl's scripts write
  them), and the only way Hydra users expect to *add* a key; a new
  key is legal only inside a free-form mapping (``model.override_config``,
  ``custom_reward_function.reward_kwargs``, ``rollout.engine_kwargs``, ...). Elsewhere a key
  that is not in the schema is an error with a did-you-mean suggestion.
- ``~a.b``: delete the key from the user values, i.e. back to the schema default (``~a.b=v``
  deletes only when the current value is ``v``).
- An override the caller's ``translate`` recognises (the loader passes the seed-layout
  translation of :mod:`verl.config.compat.seed_layout`: ``trainer.rollout_batch_size=64``,
  ``algorithm=<name>``) is merged as the canonical values it returns.
- Sweeps (``a=1,2``) and package overrides (``a@b=c``) are rejected: one run, one config.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verl.config._tree import get_path, merge_trees, nested, set_path
from verl.config.errors import ConfigError
from verl.config.introspect import free_form_keys, key_kind, unknown_key_message
from verl.config.schema import RootConfig

__all__ = ["apply_overrides", "parse_overrides"]


def parse_overrides(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parse of ``overrides``.

    Raises:
        ConfigError: one line naming the key of the first override that does not parse, its
            value and Hydra's reason (``trainer.logger: cannot parse the value '[console' ...``).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    try:
        return parser.parse_overrides(list(overrides))
    except HydraException as e:
        for text in overrides:  # find the one at fault, to name its key
            try:
                parser.parse_overrides([text])
            except HydraException as one:
                raise ConfigError(_syntax_message(text, one)) from None
        raise ConfigError(f"bad override: {_hydra_reason(e)}") from None


def _hydra_reason(e: Exception) -> str:
    """Hydra's message without its grammar link and the repeated input."""
    reason = str(e).split(" See https://", 1)[0].split("\nSee https://", 1)[0]
    return " ".join(reason.split())


def _syntax_message(text: str, e: Exception) -> str:
    key, sep, value = text.partition("=")
    key = key.strip().lstrip("+~")
    if not sep:
        return f"bad override {text!r}: expected key=value ({_hydra_reason(e)})"
    hint = ""
    if value.lstrip().startswith(("[", "{")) or value.rstrip().endswith(("]", "}")):
        hint = (
            "; a list is written [a,b] and a mapping {k:v}, brackets closed, and the whole override quoted "
            f"in the shell, e.g. '{key}=[a,b]'"
        )
    return f"{key}: cannot parse the value {value!r} ({_hydra_reason(e)}){hint}"


def _delete(tree: dict[str, Any], key: str, expected: Any) -> None:
    parent, leaf = get_path(tree, key)
    if parent is None or leaf not in parent:
        return  # already at its default
    if expected is not None and parent[leaf] != expected:
        raise ConfigError(f"~{key}={expected!r}: the current value is {parent[leaf]!r}, not deleted")
    del parent[leaf]


def apply_overrides(
    tree: dict[str, Any],
    overrides: Sequence[str],
    translate: Callable[[str, Any], dict[str, Any] | None] | None = None,
    root: type | None = RootConfig,
    owned: Callable[[dict[str, Any], Callable[[str], str]], None] | None = None,
) -> dict[str, Any]:
    """Applies dotted overrides to the user's values: the one override applier of every command.

    Args:
        tree: Plain nested dict of user values (composed YAML files), not modified.
        overrides: Strings like ``"actor_rollout_ref.actor.optim.lr=1e-6"``, in Hydra's grammar.
        translate: ``translate(key, value)`` -> canonical values of an override written in
            another layout, or None when the override is canonical.
        root: The schema dataclass the keys belong to (``RootConfig``, ``SFTRootConfig``, ...);
            None skips the key checks (a layout whose keys its caller checks afterwards).
        owned: ``owned(values, key_kind)`` raises the "not supported yet" error for an unknown key
            that another part of the product is adding (`verl.config.compat.verl_keys.check_unknown_owned`).

    Returns:
        The new dict of user values.

    Raises:
        ConfigError: Unparsable override, unknown key (with did-you-mean), ``+`` outside a
            free-form mapping, ``~key=v`` whose current value is not ``v``, sweep or package
            override.
    """
    if not overrides:
        return tree
    tree = merge_trees({}, tree)

    def kind_of(key: str) -> str:
        return "free" if root is None else key_kind(key, root)

    for override in parse_overrides(overrides):
        key = override.key_or_group
        text = override.input_line or key
        if override.package is not None:
            raise ConfigError(f"override '{text}': package overrides (@) are not supported")
        if override.is_sweep_override():
            raise ConfigError(f"override '{text}': sweeps are not supported (one run, one config)")
        kind = kind_of(key)
        if override.is_delete():
            if kind == "unknown":
                raise ConfigError(unknown_key_message(key, root))
            _delete(tree, key, override.value())
            continue
        value = override.value()
        translated = translate(key, value) if translate is not None else None
        if translated is not None:
            tree = merge_trees(tree, translated)
            continue
        if kind == "unknown":
            if owned is not None:
                owned(nested(key, value), kind_of)  # a key another part of the product is adding
            message = unknown_key_message(key, root)
            if override.is_add() or override.is_force_add():
                message += "; '+' adds new keys only inside the free-form mappings " + ", ".join(free_form_keys(root))
            raise ConfigError(message)
        parent, leaf = get_path(tree, key)
        if isinstance(value, dict) and parent is not None and isinstance(parent.get(leaf), dict):
            tree = merge_trees(tree, nested(key, value))
        else:
            set_path(tree, key, value)
    return tree
