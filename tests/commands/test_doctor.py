"""``verl doctor`` (issue 12.7): one screen with versions, devices, what works here, hub settings
and the pre-flight checks of a given config."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import tiny_run_overrides

from verl.commands.doctor import capabilities, report


def test_capabilities_are_exercised():
    caps = {name: (status, detail) for name, status, detail in capabilities()}
    assert caps["gloo + FSDP2"] == ("ok", "gloo all-reduce and FSDP2 fully_shard forward/backward work")
    assert caps["tensorboard"][0] == "ok"
    assert caps["ray"][0] == "ok" and "importable" in caps["ray"][1]


def test_report_with_config_runs_preflight(tiny_model_dir, tmp_path):
    text, ok = report(None, tiny_run_overrides(tiny_model_dir, tmp_path))
    assert ok, text
    for section in ("versions", "devices", "works here", "hub / offline", "pre-flight:"):
        assert f"\n{section}" in f"\n{text}", section
    assert "torch " in text and "transformers " in text and "HF_HUB_OFFLINE" in text
    assert "prompt + response 30 ≤ context 4096" in text
    text, ok = report(None, tiny_run_overrides(tiny_model_dir, tmp_path, **{"custom_reward_function.name": "nope"}))
    assert not ok
    assert re.search(r"reward function +FAIL +custom_reward_function.name: reward function 'nope' not found", text)


@pytest.mark.e2e
def test_console_script_one_screen(tiny_model_dir, tmp_path):
    script = Path(sys.executable).parent / "verl"
    start = time.perf_counter()
    proc = subprocess.run(
        [str(script), "doctor", *tiny_run_overrides(tiny_model_dir, tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) <= 45  # one screen
    assert elapsed < 120, elapsed  # a hang guard: ≤ 15 s on an idle 2-core machine, several times that under load


def test_a_slow_half_precision_check_shows_as_warn():
    from verl.commands.doctor import _check_row
    from verl.run.preflight import Check

    assert _check_row(Check("half precision", True, "WARNING: bfloat16 matmul 40.0x ...")) == (
        "half precision",
        "WARN",
        "bfloat16 matmul 40.0x ...",
    )
    assert _check_row(Check("pad token", True, "pad token '<pad>'")) == ("pad token", "ok", "pad token '<pad>'")
    assert _check_row(Check("model", False, "bad")) == ("model", "FAIL", "bad")
    assert _check_row(Check("reward function", None, "skipped")) == ("reward function", "--", "skipped")
