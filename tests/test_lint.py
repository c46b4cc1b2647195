"""``ruff check`` (rules in pyproject.toml ``[tool.ruff]``) passes on the package, tests, benchmarks and CI scripts.

CI runs only ``python -m pytest``, so the lint runs here; it takes about a second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINTED = ["verl", "tests", "benchmarks", "examples", ".ci"]


def test_ruff_check_passes() -> None:
    assert importlib.util.find_spec("ruff") is not None, "ruff is not installed: pip install -e '.[dev]'"
    paths = [p for p in LINTED if (ROOT / p).exists()]
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"ruff check failed (run `ruff check {' '.join(paths)}`):\n{proc.stdout}{proc.stderr}"


def test_ruff_check_reports_an_error(tmp_path: Path) -> None:
    """The rule set is live: an unused import and a bare ``except`` in a scratch file are reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ntry:\n    x = 1\nexcept:\n    x = 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
         "--output-format", "concise", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert "F401" in proc.stdout and "E722" in proc.stdout
