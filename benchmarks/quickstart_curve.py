"""The quick start's reference learning curve: held-out greedy accuracy at every validation step.

Runs ``verl train`` with no arguments (preset ``quickstart``: GRPO on the built-in arithmetic
task with ``builtin://tiny-arithmetic``, 50 steps, validation every 5) in this process with
``trainer.seed`` (default 1, the preset's) and writes the curve as JSON::

    {"preset": "quickstart", "seed": 1, "metric": "val/accuracy",
     "steps": [0, 5, ..., 50], "accuracy": [0.28125, ..., 0.876953125],
     "torch": "2.13.0+cpu", "cpu_capability": "AVX512", "num_threads": 2, "wall_s": 95.1}

``accuracy[i]`` is the share of the 512 held-out problems answered exactly by greedy decoding
after ``steps[i]`` RL steps. The checked-in ``tests/fixtures/quickstart_curve.json`` is this
script's output; ``tests/trainer/ppo/test_quickstart_curve.py`` reruns the quick start (slow tier)
and compares every point within a small tolerance, and checks (fast tier) that the fixture's
first and last points are the README's numbers.

Usage::

    python benchmarks/quickstart_curve.py --out tests/fixtures/quickstart_curve.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from verl.commands.train import run

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "quickstart_curve.json"
METRIC = "val/accuracy"


def quickstart_curve(work_dir: Path, seed: int = 1) -> dict[str, Any]:
    """Run the quick start under ``work_dir`` and return its curve record (format in the module docstring)."""
    start = time.perf_counter()
    history = run(
        "quickstart",
        [
            f"trainer.output_dir={work_dir / 'out'}",
            f"trainer.default_local_dir={work_dir / 'ckpt'}",
            "trainer.progress_bar=false",
            f"trainer.seed={seed}",
        ],
    )
    points = [(int(h["step"]), float(h[METRIC])) for h in history if METRIC in h]
    return {
        "preset": "quickstart",
        "seed": seed,
        "metric": METRIC,
        "steps": [s for s, _ in points],
        "accuracy": [a for _, a in points],
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "num_threads": torch.get_num_threads(),
        "wall_s": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON to write (default: the test fixture)")
    parser.add_argument("--seed", type=int, default=1, help="trainer.seed (default 1, the preset's)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verl-quickstart-curve-") as work:
        record = quickstart_curve(Path(work), args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"{len(record['steps'])} points, {record['accuracy'][0]:.1%} -> {record['accuracy'][-1]:.1%}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
