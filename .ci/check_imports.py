#!/usr/bin/env python3
"""Checks DESIGN.md §5's import order: folders import only folders below them, and no file-level cycle.

Layers, top to bottom (a folder may import its own layer's folders and anything below;
`TYPE_CHECKING`-only imports are type hints and do not count):

    cli, trainer, recipes (built-in model builds), model_merger (verl's merge CLI path), utils/config (the seed API's ``verl.utils.config.load_config`` alias),
        utils/reward_score (verl's module path, a re-export of ``verl.reward.scorers``)
    workers
    single_controller, engine, workers/rollout, tools, interactions
    modules
    algorithms, reward, data, config
    protocol, utils, version

`ALLOWED` lists exceptions (function-level upward imports), each with its reason; it is empty.

Usage: ``python .ci/check_imports.py`` (exit 1 with one line per problem), also run by
``tests/test_import_layers.py``.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "verl"
LAYERS: list[set[str]] = [
    {"cli", "trainer", "recipes", "experimental", "__init__", "model_merger", "utils/config", "utils/reward_score"},
    {"workers", "workers/config"},
    {"single_controller", "engine", "workers/rollout", "tools", "interactions"},
    {"modules"},
    {"algorithms", "reward", "data", "config"},
    {"protocol", "utils", "version"},
]
ALLOWED: dict[tuple[str, str], str] = {}
"""(importer, imported) -> why this function-level upward import is allowed."""

RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def folder_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    if parts[0] in ("workers", "utils") and len(parts) > 1 and parts[1] in ("rollout", "config", "reward_score"):
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """verl modules imported by ``path`` (at any depth, except under ``if TYPE_CHECKING``)."""
    out: set[str] = set()
    is_pkg = path.name == "__init__.py"

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("verl"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                    pkg = pkg[: len(pkg) - child.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                if base.startswith("verl"):
                    for a in child.names:
                        out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in out if m in known} | {m.rsplit(".", 1)[0] for m in out if m not in known and m.rsplit(".", 1)[0] in known}


def problems() -> list[str]:
    files = {module_of(p): p for p in ROOT.rglob("*.py")}
    known = set(files)
    graph = {m: imports_of(p, m, known) - {m} - {d for (a, d) in ALLOWED if a == m} for m, p in files.items()}
    found = []
    for m, deps in sorted(graph.items()):
        src = folder_of(m)
        for d in sorted(deps):
            dst = folder_of(d)
            if src != dst and src in RANK and dst in RANK and RANK[dst] < RANK[src]:
                found.append(f"{m} ({src}) imports {d} ({dst}): upward in DESIGN.md's order")
            if src not in RANK or dst not in RANK:
                found.append(f"{m} -> {d}: folder {src if src not in RANK else dst} is not in the layer table")
    found += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    folder_graph: dict[str, set[str]] = defaultdict(set)
    for m, deps in graph.items():
        folder_graph[folder_of(m)].update(folder_of(d) for d in deps if folder_of(d) != folder_of(m))
    found += [f"folder cycle: {' -> '.join(c)}" for c in _cycles(folder_graph)]
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp) + [sorted(comp)[0]])

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            strong(v)
    return out


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "imports follow DESIGN.md's order; no cycles")
    sys.exit(1 if found else 0)
