"""Imports point one way between folders, and no file or folder imports itself back."""

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
    assert checker.folder_of("verl.workers.rollout.hf.hf_rollout") == "workers/rollout"
    assert checker.folder_of("verl.workers.rollout.hf_rollout") == "faces"  # verl's path, a face
    assert checker.RANK["commands"] < checker.RANK["trainer"] < checker.RANK["run"] < checker.RANK["engine"]
    assert (
        checker.RANK["trainer"]
        < checker.RANK["workers"]
        < checker.RANK["engine"]
        < checker.RANK["modules"]
        < checker.RANK["data"]
    )


def test_faces_hold_only_imports_and_are_printed_with_their_reason(tmp_path):
    checker = _checker()
    face = tmp_path / "face.py"
    face.write_text(
        '"""doc"""\nimport sys\nfrom verl.x import y\n__all__ = ["y"]\nif __name__ == "__main__":\n    sys.exit(y())\n'
    )
    grown = tmp_path / "grown.py"
    grown.write_text('"""doc"""\nfrom verl.x import y\n\ndef helper():\n    return y\n')
    checker.FACES = {"verl.face": "why", "verl.grown": "why"}
    found = checker.face_problems({"verl.face": face, "verl.grown": grown})
    assert found == ["verl.grown line 4: a face holds only imports, __all__ and a __main__ call"]
    edges = _checker().face_edges()
    assert "  verl.trainer.main_ppo -> verl.commands.train: " in "\n".join(edges)
    assert all(": " in e for e in edges)


def test_no_test_module_sits_beside_the_tests_vllm_folder():
    """pytest puts a test file's folder on sys.path: beside ``tests/workers/rollout/vllm/`` that folder would be
    importable as a namespace package named ``vllm`` where vLLM is not installed (find_spec("vllm") not None)."""
    folder = SCRIPT.parent.parent / "tests" / "workers" / "rollout"
    assert (folder / "vllm").is_dir()
    assert sorted(p.name for p in folder.glob("*.py")) == []
