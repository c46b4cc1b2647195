"""Code-sandbox latency and the multi-turn code-tool task's step time, isolated vs a baseline.

``latency``: start-to-result wall time of ``print(1)`` (from asking for a run to having its
output), p50 / p99 over ``--n`` runs, for a cold start per run (``SandboxPool(warm=0)``) and for
the warm pool (``warm=2``; runs spaced by ``--gap-s``, as tool calls are between generation
turns, so a replacement worker is ready). With ``--baseline-rev REV`` the same for the sandbox
of that git revision (its ``verl/tools/sandbox.py`` and bootstrap, loaded from ``git show``).

``step``: ``verl train calculator`` (the built-in multi-turn tool task: 16 prompts x 8
trajectories a step) with the calculator answered by the code sandbox
(``tests/tools/sandbox_tool_helpers.py``), ``--steps`` steps, ``--rounds`` runs; reports
``timing_s/step`` and ``timing_s/gen`` per step, the tool calls and tool errors. With
``--baseline-rev REV`` the same run on a git worktree of that revision (same helper), alternated
with ours.

Usage: ``.venv/bin/python benchmarks/bench_sandbox.py latency --baseline-rev 9f6a999 --out x.json``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]  # noqa: E731 - nearest rank
    return {
        "p50_ms": round(1000 * statistics.median(xs), 1),
        "p99_ms": round(1000 * pick(0.99), 1),
        "mean_ms": round(1000 * statistics.fmean(xs), 1),
        "n": len(xs),
    }


async def _timed(run, n: int, gap_s: float) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        result = await run("print(1)")
        out.append(time.perf_counter() - t)
        assert result.stdout == "1\n", result
        await asyncio.sleep(gap_s)
    return out


def _baseline_module(rev: str):
    """The sandbox module of ``rev`` (its bootstrap next to it), imported under another name."""
    d = Path(tempfile.mkdtemp(prefix="verl-sandbox-baseline-"))
    for name in ("sandbox.py", "_sandbox_child.py"):
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:verl/tools/{name}"], check=True, capture_output=True, text=True
        ).stdout
        (d / name).write_text(text)
    spec = importlib.util.spec_from_file_location("baseline_sandbox", d / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_sandbox"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def latency(n: int, gap_s: float, baseline_rev: str | None) -> dict:
    from verl.tools.sandbox import SandboxPool

    async def go():
        out = {}
        cold = SandboxPool(warm=0)
        await _timed(cold.run, 3, gap_s)  # imports, page cache
        out["bubblewrap_cold"] = _percentiles(await _timed(cold.run, n, gap_s))
        warm = SandboxPool(warm=2)
        warm.start()
        await asyncio.sleep(1.0)
        out["bubblewrap_warm"] = _percentiles(await _timed(warm.run, n, gap_s))
        warm.close()
        if baseline_rev:
            old = _baseline_module(baseline_rev)
            run = lambda code: old.run_python(code)  # noqa: E731
            await _timed(run, 3, gap_s)
            out[f"baseline_{baseline_rev}"] = _percentiles(await _timed(run, n, gap_s))
        return out

    return asyncio.run(go())


def _train(tree: Path, steps: int, out_dir: Path) -> list[dict]:
    tools = out_dir / "tools.yaml"
    out_dir.mkdir(parents=True, exist_ok=True)
    tools.write_text(
        "tools:\n  - class_name: tests.tools.sandbox_tool_helpers.SandboxCalculatorTool\n    config: {timeout_s: 20}\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "verl.cli",
        "train",
        "calculator",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "data.val_files=[]",
        "trainer.logger=[jsonl]",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        "trainer.save_freq=-1",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        f"trainer.output_dir={out_dir / 'out'}",
        f"trainer.default_local_dir={out_dir / 'ckpt'}",
    ]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"verl train failed in {tree}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out_dir / "out" / "metrics.jsonl").read_text().splitlines()]
    keys = ("step", "timing_s/step", "timing_s/gen", "tool_call_counts/mean", "multiturn/tool_errors")
    return [{k: round(r[k], 3) for k in keys if k in r} for r in rows if "timing_s/step" in r]


def _patch_semaphore(path: Path) -> None:
    """Gives the baseline's code tool one semaphore per event loop (the rollout's asyncio.run per
    step); without it the baseline's calls from step 2 on fail at once and its steps look fast."""
    text = path.read_text()
    old = "        if self._semaphore is None:"
    if old in text:
        path.write_text(
            text.replace(
                old,
                "        if self._semaphore is None or getattr(self._semaphore, '_loop', None) "
                "not in (None, asyncio.get_running_loop()):",
            )
        )


def step_time(steps: int, baseline_rev: str | None, rounds: int) -> dict:
    out = {}
    tmp = Path(tempfile.mkdtemp(prefix="verl-bench-sandbox-"))
    runs = [("bubblewrap_warm_pool", ROOT)]
    if baseline_rev:
        tree = tmp / "baseline-tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), baseline_rev],
            check=True,
            capture_output=True,
        )
        _patch_semaphore(tree / "verl" / "tools" / "code_interpreter.py")
        runs = [(f"baseline_{baseline_rev}", tree), *runs] * rounds
    else:
        runs = runs * rounds
    try:
        for i, (name, tree) in enumerate(runs):  # alternated: A B A B ..., so load drifts hit both
            rows = _train(tree, steps, tmp / f"{name}-{i}")
            out.setdefault(name, {"runs": []})["runs"].append(rows)
        for record in out.values():
            later = [r for rows in record["runs"] for r in rows[1:]]  # step 1 also pays one-time warm-up
            record["median_step_s_after_first"] = round(statistics.median(r["timing_s/step"] for r in later), 2)
            record["median_gen_s_after_first"] = round(statistics.median(r["timing_s/gen"] for r in later), 2)
            record["tool_errors"] = sum(r["multiturn/tool_errors"] for rows in record["runs"] for r in rows)
    finally:
        if baseline_rev:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "baseline-tree")],
                capture_output=True,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["latency", "step"])
    p.add_argument("--n", type=int, default=100, help="runs per latency series")
    p.add_argument("--gap-s", type=float, default=0.05, help="pause between latency runs")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="step: alternated runs of each")
    p.add_argument("--baseline-rev", default=None, help="git revision of the sandbox to compare with")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    result = (
        latency(args.n, args.gap_s, args.baseline_rev)
        if args.what == "latency"
        else step_time(args.steps, args.baseline_rev, args.rounds)
    )
    result = {"what": args.what, "loadavg_before": load, "cpus": os.cpu_count(), **result}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
