"""Held-out accuracy over steps, synchronous split-pool vs ``separate_async``, on one PNG.

For each preset (default: the built-in quick start) two runs of the same steps: ``sync`` with the
rollout on its own worker (``hybrid_engine=false``) and ``separate_async`` one batch ahead
(``parameter_sync_step=1``, ``max_off_policy_threshold=2``: staleness 1). Writes
``benchmarks/async_learning.png`` and ``benchmarks/async_learning.json``.

Usage::

    python benchmarks/plot_async_learning.py [--presets quickstart calculator] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ASYNC = [
    "trainer.v1.trainer_mode=separate_async",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "trainer.v1.sampler.max_off_policy_threshold=2",
]


def curve(preset: str, extra: list[str], out: Path) -> list[tuple[int, float, float]]:
    """(step, val/accuracy, staleness mean) of one run."""
    from verl.commands.train import run

    run(
        preset,
        [
            f"trainer.output_dir={out / 'out'}",
            f"trainer.default_local_dir={out / 'ckpt'}",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
            "trainer.plot=false",
            "trainer.save_freq=-1",
            *extra,
        ],
    )
    rows = {}
    for line in (out / "out" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(int(row["step"]), {}).update(row)
    return [
        (s, r["val/accuracy"], r.get("training/off_policy/trajectory_staleness/mean", 0.0))
        for s, r in sorted(rows.items())
        if "val/accuracy" in r
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["quickstart"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "async_learning"))
    ns = parser.parse_args()
    import torch

    torch.set_num_threads(ns.threads)
    curves: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset in ns.presets:
            curves[f"{preset} sync (split pool)"] = curve(
                preset, ["actor_rollout_ref.hybrid_engine=false"], Path(tmp) / f"{preset}-sync"
            )
            curves[f"{preset} separate_async"] = curve(preset, ASYNC, Path(tmp) / f"{preset}-async")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in curves.items():
        ax.plot(
            [p[0] for p in points],
            [100 * p[1] for p in points],
            marker="o",
            label=name,
            linestyle="--" if "async" in name else "-",
        )
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out greedy accuracy (%)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{ns.out}.png", dpi=110)
    Path(f"{ns.out}.json").write_text(json.dumps(curves, indent=1))
    for name, points in curves.items():
        print(f"{name}: {100 * points[0][1]:.1f}% -> {100 * points[-1][1]:.1f}% at step {points[-1][0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
