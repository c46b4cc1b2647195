"""DESIGN.md §5: imports point one way between folders, and no file or folder imports itself back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "check_imports.py"


def _checker():
    spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verl_imports_follow_the_design_order():
    assert _checker().problems() == []


def test_checker_sees_upward_imports_and_cycles():
    checker = _checker()
    graph = {"verl.a.x": {"verl.b.y"}, "verl.b.y": {"verl.a.x"}}
    assert checker._cycles(graph) == [["verl.a.x", "verl.b.y", "verl.a.x"]]
    assert checker.folder_of("verl.workers.rollout.hf_rollout") == "workers/rollout"
    assert checker.RANK["trainer"] < checker.RANK["workers"] < checker.RANK["engine"] < checker.RANK["modules"] < checker.RANK["data"]
