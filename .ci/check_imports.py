#!/usr/bin/env python3
"""Checks the package's import order: folders import only folders below them, and no file-level cycle.

Layers, top to bottom (a folder may import its own layer's folders and anything below;
`TYPE_CHECKING`-only imports are type hints and do not count):

    cli, commands (the sub-commands), recipes (built-in model builds), experimental (verl's entry paths), faces
    trainer (the loops: trainer/ppo, trainer/supervised, trainer/async_rl)
    workers, run (what every run shares: checkpoints, tracking, pre-flight, HF export)
    single_controller, engine, workers/rollout, tools, interactions
    modules
    algorithms, reward, data, config
    protocol, utils, version

`FACES` are verl's import paths (``verl.trainer.main_ppo``, ``verl.utils.reward_score``, ...) kept as
thin files over the module that implements them. They sit on the top layer whatever folder holds
them, may hold only imports, ``__all__`` and an ``if __name__ == "__main__":`` call, and their edges
are the only upward arrows by folder: each is printed with its reason. `ALLOWED` lists other
exceptions (function-level upward imports), each with its reason; it is empty.

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
    {"cli", "commands", "recipes", "experimental", "__init__", "model_merger", "faces"},
    {"trainer"},
    {"workers", "workers/config", "run"},
    {"single_controller", "engine", "workers/rollout", "tools", "interactions"},
    {"modules"},
    {"algorithms", "reward", "data", "config"},
    {"protocol", "utils", "version"},
]
_VERL_ENTRY = "verl's module path, kept for scripts that import it or run it with python -m"
FACES: dict[str, str] = {
    "verl.trainer.main_ppo": _VERL_ENTRY + " (the RL command: verl.commands.train)",
    "verl.trainer.main_eval": _VERL_ENTRY + " (offline scoring: verl.commands.evaluate)",
    "verl.trainer.main_generation": _VERL_ENTRY + " (offline generation: verl.commands.generate)",
    "verl.trainer.main_generation_server": _VERL_ENTRY + " (rollout servers: verl.commands.generate_server)",
    "verl.trainer.sft_trainer": _VERL_ENTRY + " (the SFT command: verl.commands.sft)",
    "verl.trainer.fsdp_sft_trainer": _VERL_ENTRY + " (verl's older SFT path: verl.commands.sft)",
    "verl.trainer.dpo_trainer": _VERL_ENTRY + " (DPO: verl.commands.sft)",
    "verl.trainer.sft_trainer_ray": _VERL_ENTRY + " (SFT on Ray: verl.commands.sft_ray)",
    "verl.workers.rollout.hf_rollout": _VERL_ENTRY + " (the hf engine: verl.workers.rollout.hf.hf_rollout)",
    "verl.utils.config": "the seed API's verl.utils.config.load_config (verl.config)",
    "verl.utils.reward_score": "verl's reward-score module path (verl.reward.scorers)",
}
"""verl import path -> why it stays (a thin file over its implementation)."""
ALLOWED: dict[tuple[str, str], str] = {}
"""(importer, imported) -> why this function-level upward import is allowed."""

RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def folder_of(module: str, faces: bool = True) -> str:
    """The layer-table folder of ``module``; a face is ``"faces"`` unless ``faces=False`` (then where it sits)."""
    if faces and module in FACES:
        return "faces"
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    if parts[0] == "workers" and len(parts) > 1 and parts[1] in ("rollout", "config"):
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


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
    return {m for m in out if m in known} | {
        m.rsplit(".", 1)[0] for m in out if m not in known and m.rsplit(".", 1)[0] in known
    }


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
                found.append(f"{m} ({src}) imports {d} ({dst}): upward in the layer order")
            if src not in RANK or dst not in RANK:
                found.append(f"{m} -> {d}: folder {src if src not in RANK else dst} is not in the layer table")
    found += face_problems(files)
    found += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    folder_graph: dict[str, set[str]] = defaultdict(set)
    for m, deps in graph.items():
        folder_graph[folder_of(m)].update(folder_of(d) for d in deps if folder_of(d) != folder_of(m))
    found += [f"folder cycle: {' -> '.join(c)}" for c in _cycles(folder_graph)]
    return found


def _is_main_guard(node: ast.stmt) -> bool:
    t = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(t, ast.Compare)
        and isinstance(t.left, ast.Name)
        and t.left.id == "__name__"
        and len(t.comparators) == 1
        and isinstance(t.comparators[0], ast.Constant)
        and t.comparators[0].value == "__main__"
    )


def face_problems(files: dict[str, Path]) -> list[str]:
    """A face holds imports, ``__all__``, its docstring and a ``__main__`` call only: nothing real grows in one."""
    out = []
    for face in FACES:
        if face not in files:
            out.append(f"{face}: listed in FACES but no such module")
            continue
        for i, node in enumerate(ast.parse(files[face].read_text()).body):
            doc = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            all_ = isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
            if not (doc or all_ or isinstance(node, (ast.Import, ast.ImportFrom)) or _is_main_guard(node)):
                out.append(f"{face} line {node.lineno}: a face holds only imports, __all__ and a __main__ call")
    return out


def face_edges() -> list[str]:
    """Each face's imports that point upward by the folder the face sits in, with the face's reason."""
    files = {module_of(p): p for p in ROOT.rglob("*.py")}
    out = []
    for face, why in FACES.items():
        if face not in files:
            continue
        home = RANK.get(folder_of(face, faces=False), 0)
        for d in sorted(imports_of(files[face], face, set(files)) - {face}):
            if RANK.get(folder_of(d), 99) < home:
                out.append(f"  {face} -> {d}: {why}")
    return out


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
    if not found:
        print("imports follow the layer order; no cycles. Allowed upward edges (verl's import paths):")
        print("\n".join(face_edges()))
    else:
        print("\n".join(found))
    sys.exit(1 if found else 0)
