"""Comments and docstrings speak of the code: no reference to documents that are not shipped with the
package (design / style notes, fault lists, seed folders, issue numbers, fault ids such as ``B12``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PACKAGE_PATTERN = re.compile(
    r"DESIGN\.md|STYLE\.md|known_faults|seeds/|\.\./shared|shared/seeds|\bissue [0-9]+|\b(fault )?B[0-9]{1,2}\b"
)
"""What no file under ``verl/`` may say (code, comments, docstrings, config and page assets)."""
DOCS_PATTERN = re.compile(r"DESIGN\.md|STYLE\.md|known_faults|\.\./shared")
"""What the README and ``docs/`` may not link to (those documents are not in the repository)."""
SUFFIXES = (".py", ".yaml", ".yml", ".js", ".html", ".css", ".md", ".txt")


def _hits(files: list[Path], pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return out


def test_package_names_no_outside_document():
    files = sorted(p for p in (ROOT / "verl").rglob("*") if p.suffix in SUFFIXES and p.is_file())
    assert len(files) > 100
    hits = _hits(files, PACKAGE_PATTERN)
    assert not hits, "references to documents outside the repository:\n" + "\n".join(hits)


def test_readme_and_docs_link_no_outside_document():
    files = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.is_file())]
    hits = _hits([p for p in files if p.is_file()], DOCS_PATTERN)
    assert not hits, "links to documents outside the repository:\n" + "\n".join(hits)


def test_the_patterns_catch_each_kind():
    for text in (
        "(DESIGN.md §4)",
        "STYLE.md 10",
        "known_faults B32",
        "fault B7",
        "issue 4",
        "see ../shared/x",
        "``shared/seeds``",
    ):
        assert PACKAGE_PATTERN.search(text), text
    for text in ("B200 GPUs", "Batch-size units", "tests/test_lint.py", "(B, R)", "seed=0"):
        assert not PACKAGE_PATTERN.search(text), text
