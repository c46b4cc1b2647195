"""Walks a dataclass schema: valid dotted keys, free-form mappings, type names, key checks.

The one key walker of every command's config: each function takes the schema root
(``RootConfig`` by default; ``SFTRootConfig``, the generate and eval roots for the other commands).

Used by the loader to reject unknown keys with a did-you-mean suggestion and to describe the
expected type in wrong-type messages. Free-form fields (typed ``Dict[...]`` or ``Any``, e.g.
``actor_rollout_ref.model.override_config``) accept any keys below them.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from typing import Any, Union

from verl.config.errors import ConfigError
from verl.config.schema import RootConfig

__all__ = [
    "all_keys",
    "check_tree",
    "field_hints",
    "free_form_keys",
    "key_kind",
    "type_at",
    "type_name",
    "unknown_key_message",
]


@functools.lru_cache(maxsize=None)
def field_hints(cls: type) -> dict[str, Any]:
    """Resolved type hints of a schema dataclass's fields, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(_strip_optional(tp))


def _is_free_form(tp: Any) -> bool:
    inner = _strip_optional(tp)
    return inner is Any or typing.get_origin(inner) is dict or inner is dict


def _is_str_list(tp: Any) -> bool:
    inner = _strip_optional(tp)
    return typing.get_origin(inner) is list and typing.get_args(inner) == (str,)


def type_name(tp: Any) -> str:
    """Human-readable name of a schema type: ``float``, ``int or null``, ``list of str``, ..."""
    inner = _strip_optional(tp)
    suffix = " or null" if inner is not tp else ""
    if _is_section(inner):
        return "a mapping (config section)" + suffix
    origin = typing.get_origin(inner)
    if origin is list:
        return f"list of {type_name(typing.get_args(inner)[0])}" + suffix
    if origin is dict or inner is dict:
        return "a mapping" + suffix
    if inner is Any:
        return "any value"
    return getattr(inner, "__name__", str(inner)) + suffix


@functools.lru_cache(maxsize=None)
def _key_table(root: type = RootConfig) -> dict[str, Any]:
    """Every dotted key of the schema rooted at ``root`` (sections and leaves) -> its type."""
    table: dict[str, Any] = {}

    def walk(cls: type, prefix: str) -> None:
        for name, tp in field_hints(cls).items():
            path = f"{prefix}.{name}" if prefix else name
            table[path] = tp
            if _is_section(tp):
                walk(_strip_optional(tp), path)

    walk(root, "")
    return table


def _rl_layout_hint(path: str) -> str | None:
    from verl.config.compat.verl_hints import layout_hint

    return layout_hint(path)


KEY_HINTS: dict[type, Any] = {RootConfig: _rl_layout_hint}
"""Per schema root: ``hint(path) -> message | None`` for a key a known other layout spells
differently (verl's renamed keys, sections of engines the product lacks), tried before the
did-you-mean search."""


def all_keys(root: type = RootConfig) -> list[str]:
    """Every valid dotted key of the schema rooted at ``root`` (sections and leaves)."""
    return list(_key_table(root))


def free_form_keys(root: type = RootConfig) -> list[str]:
    """Dotted keys of the free-form mapping fields, where ``+key=value`` may add new keys."""
    return [k for k, tp in _key_table(root).items() if _is_free_form(tp) and _strip_optional(tp) is not Any]


def type_at(path: str, root: type = RootConfig) -> Any:
    """Schema type of a dotted key (``None`` when the key is not in the schema)."""
    return _key_table(root).get(path)


def key_kind(path: str, root: type = RootConfig) -> str:
    """Classifies a dotted key: ``"schema"``, ``"free"`` (below a free-form field), ``"verl"`` (one of
    verl's keys without effect here, not a field: `verl.config.compat.verl_inert`) or ``"unknown"``."""
    table = _key_table(root)
    if path in table:
        return "schema"
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        tp = table.get(".".join(parts[:i]))
        if tp is not None:
            if _is_free_form(tp):
                return "free"
            break
    from verl.config.compat.verl_inert import inert_kind

    return inert_kind(path, root) or "unknown"


@functools.lru_cache(maxsize=None)
def _suggestion_table(root: type) -> dict[str, Any]:
    """The schema's keys and verl's keys without effect (`verl.config.compat.verl_inert`), which are valid too."""
    from verl.config.compat.verl_inert import inert_tree

    table = dict(_key_table(root))

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            table.setdefault(path, dict if isinstance(value, dict) else Any)
            if isinstance(value, dict):
                walk(value, path)

    walk(inert_tree(root), "")
    return table


def _suggestion(path: str, root: type) -> str:
    """The closest valid key to an unknown one ("" when nothing is close); see `unknown_key_message`."""
    table = _suggestion_table(root)
    parent, _, leaf = path.rpartition(".")
    rest = ""
    while parent and parent not in table:  # a misspelt section: suggest from the deepest valid one
        rest = f".{leaf}{rest}"
        parent, _, leaf = parent.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in table if k.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    suggestion = ""
    if close:
        fixed = f"{parent}.{close[0]}" if parent else close[0]
        suggestion = fixed + rest if fixed + rest in table else fixed
    if not suggestion or suggestion == path:
        last = path.rpartition(".")[2]
        same_leaf = [k for k in table if k.rpartition(".")[2] == last]
        best = difflib.get_close_matches(path, same_leaf or list(table), n=1, cutoff=0.0 if same_leaf else 0.75)
        suggestion = best[0] if best else ""
    return suggestion


def unknown_key_message(path: str, root: type = RootConfig, prefix: str = "") -> str:
    """``unknown key 'a.b' (did you mean 'a.c'?)``, matching first at the key's own level.

    The suggestion is, in order: a close name among the valid keys of the same section; the same
    leaf name in another section; the closest full dotted key. Only keys of ``root``'s schema are
    suggested, always as full dotted keys.

    Args:
        path: The unknown key, dotted, relative to ``root``.
        root: The schema dataclass the key was looked up in (``RootConfig``, ``SFTRootConfig``, ...).
        prefix: Written before both keys in the message (an entry of a list of sections:
            ``hybrid.tasks[0].``).
    """
    hint = KEY_HINTS[root](path) if root in KEY_HINTS else None
    if hint is not None:
        return hint
    suggestion = _suggestion(path, root)
    tail = f" (did you mean '{prefix}{suggestion}'?)" if suggestion else ""
    return f"unknown key '{prefix}{path}'{tail}"


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _scalar_list_elem(tp: Any) -> Any:
    """The element type of a list of str / int / float field, else None."""
    inner = _strip_optional(tp)
    if typing.get_origin(inner) is list:
        (elem,) = typing.get_args(inner) or (None,)
        if elem in (str, int, float):
            return elem
    return None


def check_tree(tree: dict[str, Any], root: type = RootConfig, prefix: str = "") -> None:
    """Rejects unknown keys and misplaced sections in a plain nested dict, in place.

    The one unknown-key walker of every command's config. Also normalises two common
    spellings: a scalar given for a list-of-scalars field becomes a one-element list
    (``data.train_files=x.parquet``, ``trainer.logger=console``, as verl's scripts write them)
    and ``null`` becomes the empty list for a list of str and for a list field that is not
    Optional. Entries of a list of sections
    (``hybrid.tasks``) are checked against the entry's dataclass.

    Args:
        tree: The user's values (from YAML files and overrides); may be modified.
        root: The schema dataclass ``tree`` describes.
        prefix: Written before the keys in messages (used for entries of a list of sections).

    Raises:
        ConfigError: An unknown key (with the closest valid one), or a scalar where a section
            is expected.
    """
    _check(tree, root, "", root, prefix)


def _check(tree: dict[str, Any], cls: type, path0: str, root: type, prefix: str) -> None:
    hints = field_hints(cls)
    for key in list(tree):
        path = f"{path0}.{key}" if path0 else str(key)
        if not isinstance(key, str) or key not in hints:
            raise ConfigError(unknown_key_message(path, root, prefix))
        tp, value = hints[key], tree[key]
        inner = _strip_optional(tp)
        if _is_section(tp):
            if isinstance(value, dict):
                _check(value, inner, path, root, prefix)
            elif not _is_interpolation(value):
                raise ConfigError(f"{prefix}{path}: expected {type_name(tp)}, got {value!r}")
        elif typing.get_origin(inner) is list and dataclasses.is_dataclass(typing.get_args(inner)[0]):
            if isinstance(value, list):
                for i, entry in enumerate(value):
                    if not isinstance(entry, dict):
                        raise ConfigError(f"{prefix}{path}[{i}]: expected a mapping (config section), got {entry!r}")
                    check_tree(entry, typing.get_args(inner)[0], f"{prefix}{path}[{i}].")
        elif _scalar_list_elem(tp) is not None and not _is_interpolation(value):
            if value is None:
                if _scalar_list_elem(tp) is str or inner is tp:  # null is a value of its own for an Optional list
                    tree[key] = []
            elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
                tree[key] = [str(value) if _scalar_list_elem(tp) is str else value]
