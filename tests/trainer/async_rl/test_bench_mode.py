"""``verl bench --mode separate_async``: steps of the async loop, measured like the synchronous ones."""

from __future__ import annotations

import json

import pytest

from verl.commands.bench.bench import main as bench_main


def test_bench_runs_separate_async_steps(tmp_path):
    out = tmp_path / "bench.json"
    assert (
        bench_main(
            [
                "--mode",
                "separate_async",
                "--steps",
                "2",
                "--threads",
                "1",
                "--work-dir",
                str(tmp_path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert "trainer.v1.trainer_mode=separate_async" in record["overrides"]
    assert len(record["metrics"]) == 2 and record["summary"]["throughput"] > 0
    # one warm-up batch: step 2 trains prompts generated before step 1's update
    assert all("training/off_policy/trajectory_staleness/mean" in m for m in record["metrics"])
    assert record["metrics"][1]["training/off_policy/trajectory_staleness/mean"] == 1.0


def test_bench_compare_is_refused_for_an_async_mode(tmp_path):
    with pytest.raises(SystemExit, match="bench_async_modes"):
        bench_main(["--mode", "separate_async", "--compare", "trl", "--steps", "2", "--work-dir", str(tmp_path)])
