"""``trainer.nnodes=2`` on a 2-node local Ray cluster (`ray.cluster_utils.Cluster`).

Each case runs `multinode_driver.py` in a subprocess (its own Ray cluster; the session's Ray
instance is untouched): a 2-node run equals the 1-node run; a node removed mid-run stops the run
within 60 s with one line naming the node, its role and rank, and the last checkpoint intact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.ray, pytest.mark.slow]
DRIVER = Path(__file__).with_name("multinode_driver.py")


def _drive(mode: str, model_dir: Path, run_dir: Path) -> dict:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(DRIVER), mode, str(model_dir), str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"driver failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :]), proc.stderr


def test_two_nodes_equal_one_node(tiny_model_dir, tmp_path):
    result, _ = _drive("equal", tiny_model_dir, tmp_path)
    assert len(result["hosts"]) == 2 and result["hosts"] == result["nodes"]  # one rank on each node
    assert set(result["two"]) == set(result["one"]) == {"1", "2"}
    for step, row in result["one"].items():
        for key, value in row.items():
            assert result["two"][step][key] == pytest.approx(value, abs=1e-5, rel=1e-5), (step, key)


def test_killed_node_is_named_within_60_s(tiny_model_dir, tmp_path):
    result, stderr = _drive("kill", tiny_model_dir, tmp_path)
    error = result["error"]
    assert error is not None and error.startswith("NodeLostError: "), error
    assert result["killed"] in error and "actor_rollout_ref rank(s) [1]" in error, error
    assert result["latency_s"] < 60, result
    print(f"node loss reported {result['latency_s']:.1f} s after the kill")
    assert sum(result["killed"] in ln and "verl node watch" in ln for ln in stderr.splitlines()) == 1
    assert int(result["latest"]) >= 1 and result["ckpt_problem"] is None, result
