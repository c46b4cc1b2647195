"""``ruff check`` and ``ruff format --check`` (settings in pyproject.toml ``[tool.ruff]``) pass on the package,
tests, benchmarks and CI scripts.

CI runs only ``python -m pytest``, so the lint runs here; it takes about a second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINTED = ["verl", "tests", "benchmarks", "examples", ".ci"]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ruff ARGS --no-cache`` in the repository root."""
    assert importlib.util.find_spec("ruff") is not None, "ruff is not installed: pip install -e '.[dev]'"
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _linted() -> list[str]:
    return [p for p in LINTED if (ROOT / p).exists()]


def test_ruff_check_passes() -> None:
    paths = _linted()
    proc = _ruff("check", "--output-format", "concise", *paths)
    assert proc.returncode == 0, f"ruff check failed (run `ruff check {' '.join(paths)}`):\n{proc.stdout}{proc.stderr}"


def test_ruff_format_is_applied() -> None:
    """Every linted file is as ``ruff format`` writes it (line length 120); fix with ``ruff format .``."""
    proc = _ruff("format", "--check", *_linted())
    assert proc.returncode == 0, f"ruff format would change files (run `ruff format .`):\n{proc.stdout}{proc.stderr}"


def test_ruff_format_reports_an_unformatted_file(tmp_path: Path) -> None:
    """The format check is live: a badly spaced scratch file is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("x=[1,2 ,3]\n")
    proc = _ruff("format", "--check", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert proc.returncode == 1 and "bad.py" in proc.stdout


def test_ruff_check_reports_an_error(tmp_path: Path) -> None:
    """The rule set is live: an unused import and a bare ``except`` in a scratch file are reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ntry:\n    x = 1\nexcept:\n    x = 2\n")
    proc = _ruff("check", "--config", str(ROOT / "pyproject.toml"), "--output-format", "concise", str(bad))
    assert proc.returncode == 1
    assert "F401" in proc.stdout and "E722" in proc.stdout
