"""``verl replay BUNDLE``: re-run a sentinel incident's actor updates in-process.

The run's parts are built from the bundle's ``config.yaml`` (same backend and worker count), the
actor is restored from the bundle's checkpoint (or keeps its initial weights), and every stored
update batch is fed to ``update_actor`` after restoring the RNG states recorded right before it
in the run. Reported per step: ``actor/pg_loss`` and ``actor/grad_norm`` as recorded and as
replayed. On CPU the replay of an exact bundle is bit-exact (same floats); exit status 1 when an
exact bundle does not reproduce, 0 otherwise (a bundle not reaching back to its checkpoint is
replayed and labelled approximate). Outputs of the replay go to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl.trainer.guards.incident import REPLAY_KEYS, read_bundle


@dataclass
class ReplayReport:
    """What `replay_bundle` found.

    Attributes:
        info: the bundle's ``incident.json``.
        rows: per replayed step ``{"step", "recorded": {key: value}, "replayed": {key: value}}``.
        reproduced: every recorded value of the last step equals its replay exactly.
    """

    info: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        last = self.rows[-1] if self.rows else None
        return bool(last) and all(last["replayed"].get(k) == v for k, v in last["recorded"].items())


def replay_bundle(path: str | Path, overrides: list[str] | None = None) -> ReplayReport:
    """Rebuild the run of bundle ``path`` and replay its stored actor updates.

    Args:
        path: an ``incident_step_<N>`` directory.
        overrides: extra config overrides (``key=value``) applied on the bundle's config.

    Raises:
        BundleError: ``path`` is not a bundle.
    """
    from verl.config import load_config
    from verl.trainer.ppo.metrics import reduce_worker_metrics
    from verl.trainer.ppo.trainer import RLTrainer
    from verl.run.checkpoint import restore_rng_state

    info, steps = read_bundle(path)
    with tempfile.TemporaryDirectory(prefix="verl_replay_") as tmp:
        cfg = load_config(
            str(Path(path) / "config.yaml"),
            [
                f"trainer.output_dir={tmp}/out",
                f"trainer.default_local_dir={tmp}/ckpt",
                "trainer.logger=[]",
                "trainer.resume_mode=disable",
                "trainer.val_before_train=false",
                "data.val_files=[]",
                "trainer.progress_bar=false",
                "trainer.plot=false",
                *(overrides or []),
            ],
        )
        trainer = RLTrainer(config=cfg)
        report = ReplayReport(info)
        try:
            wg = trainer._parts().actor_rollout_wg
            if info["checkpoint"] is not None:
                wg.load_checkpoint(str(Path(info["checkpoint"]) / "actor"))
            for s in steps:
                restore_rng_state(s.rng)
                out = wg.update_actor(s.batch)
                got = reduce_worker_metrics(out.meta_info["metrics"])
                report.rows.append(
                    {
                        "step": s.step,
                        "recorded": s.recorded,
                        "replayed": {k: float(got[k]) for k in REPLAY_KEYS if k in got},
                    }
                )
        finally:
            trainer.close()
    return report


def format_report(report: ReplayReport) -> str:
    """The table `main` prints (full float precision)."""
    info = report.info
    start = info["checkpoint"] or "the initial weights (no checkpoint before the incident)"
    lines = [
        f"incident at step {info['step']}: {'; '.join(info['reasons'])}",
        f"replayed steps {info['replay_steps']} from {start} "
        f"({'exact' if info['exact'] else 'approximate: the kept steps do not reach back to the checkpoint'})",
        f"{'step':>5}  {'key':<16} {'recorded':>24} {'replayed':>24}  equal",
    ]
    for row in report.rows:
        for k in REPLAY_KEYS:
            a, b = row["recorded"].get(k), row["replayed"].get(k)
            lines.append(f"{row['step']:>5}  {k:<16} {a!r:>24} {b!r:>24}  {'yes' if a == b else 'NO'}")
    lines.append(f"bit-exact: {'yes' if report.reproduced else 'no'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``verl replay BUNDLE [key=value ...] [--json]``; 1 when an exact bundle does not reproduce."""
    ap = argparse.ArgumentParser(prog="verl replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", help="an incident_step_<N> directory written by the sentinel")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value on the bundle's config")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    report = replay_bundle(args.bundle, args.overrides)
    if args.json:
        print(json.dumps({"incident": report.info, "rows": report.rows, "bit_exact": report.reproduced}, indent=1))
    else:
        print(format_report(report))
    return 1 if report.info["exact"] and not report.reproduced else 0
