"""The quick start's reference learning curve (tests/fixtures/quickstart_curve.json).

The fixture is the output of ``benchmarks/quickstart_curve.py``: held-out greedy accuracy at
every validation step of ``verl train`` (preset ``quickstart``, seed 1). The fast test ties it to
the README's numbers and to the preset's schedule; the slow test reruns the quick start and
compares every point.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "quickstart_curve.json"
SCRIPT = ROOT / "benchmarks" / "quickstart_curve.py"
SAME_MACHINE_TOL = 0.02
# 10 of the 512 held-out problems: with the fixture's torch and CPU capability the run repeats to
# float reduction order (the thread count may differ), so a point may move by a few problems at most.
OTHER_MACHINE_TOL = 0.05
# Another torch or CPU kind sums in another order; the curve's shape must still hold.


def _fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def test_fixture_matches_the_readme_and_the_preset_schedule() -> None:
    from verl.config import load_config

    ref = _fixture()
    cfg = load_config("quickstart", [])
    assert (ref["preset"], ref["seed"], ref["metric"]) == ("quickstart", cfg.trainer.seed, "val/accuracy")
    assert ref["steps"] == list(range(0, cfg.trainer.total_training_steps + 1, cfg.trainer.test_freq))
    assert len(ref["accuracy"]) == len(ref["steps"]) and all(0.0 <= a <= 1.0 for a in ref["accuracy"])
    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"held-out greedy accuracy goes from ([\d.]+)% to ([\d.]+)% by step (\d+) and ([\d.]+)% at\s+step (\d+)", readme
    )
    assert m, "the README's quick-start sentence moved: update this test with it"
    start, mid, mid_step, end, end_step = float(m[1]), float(m[2]), int(m[3]), float(m[4]), int(m[5])
    at = dict(zip(ref["steps"], ref["accuracy"]))
    assert round(at[0] * 100, 1) == start == 28.1  # 144 / 512: the shipped warm start
    assert at[0] * 512 == 144
    assert round(at[mid_step] * 100, 1) == mid and round(at[end_step] * 100, 1) == end
    assert end_step == ref["steps"][-1]


@pytest.mark.slow
@pytest.mark.e2e  # the whole 50-step quick start: 20 s on a quiet CPU, 18 min at load 21
@pytest.mark.timeout(3600)
def test_quickstart_reruns_the_reference_curve(tmp_path: Path) -> None:
    out = tmp_path / "curve.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ref, got = _fixture(), json.loads(out.read_text())
    assert got["steps"] == ref["steps"]
    same = (got["torch"], got["cpu_capability"]) == (ref["torch"], ref["cpu_capability"])
    tol = SAME_MACHINE_TOL if same else OTHER_MACHINE_TOL
    far = [(s, r, g) for s, r, g in zip(ref["steps"], ref["accuracy"], got["accuracy"]) if abs(g - r) > tol]
    assert not far, f"steps off the reference curve by more than {tol} (step, reference, this run): {far}"
