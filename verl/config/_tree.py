"""Small helpers on plain nested dicts of config values (dotted paths, OmegaConf merges)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

__all__ = ["get_path", "merge_trees", "nested", "set_path"]


def merge_trees(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Deep-merges ``top`` over ``base`` with OmegaConf's rules (mappings merge, lists are replaced).

    Interpolations (``${...}``) are kept unresolved; neither input is modified.
    """
    merged = OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(top))
    out = OmegaConf.to_container(merged, resolve=False)
    assert isinstance(out, dict)
    return out  # type: ignore[return-value]


def nested(path: str, value: Any) -> dict[str, Any]:
    """``nested("a.b", 1) == {"a": {"b": 1}}``."""
    return set_path({}, path, value)


def set_path(tree: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Sets ``tree[a][b] = value`` for ``path="a.b"``, creating (or replacing non-dict) parents; returns ``tree``."""
    node = tree
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    return tree


def get_path(tree: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """Returns ``(parent_dict, leaf)`` for a dotted path; the parent is None when a level is missing."""
    node: Any = tree
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), parts[-1]
