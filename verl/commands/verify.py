"""``verl verify [CONFIG] [key=value ...]``: run a config on a small slice through paths that must agree.

Each check trains the same slice (``--steps`` RL steps of ``--prompts`` prompts, validation off,
entropy computed so it is compared too) twice, changing one thing, and compares every
deterministic metric of every step and the final actor weights:

=========  ===============================================  ======================  =========
check      baseline                                         variant                 tolerance
=========  ===============================================  ======================  =========
ray        local backend, one process                       2 Ray workers           1e-5
packed     padded forwards (use_remove_padding=false)       packed (true)           1e-4
micro      one micro-batch per mini-batch                   1 trajectory per micro  1e-5
resume     uninterrupted                                    stopped after step 1,   0 on CPU
                                                            resumed in a new run    (1e-5 GPU)
async      synchronous, split rollout pool                  separate_async at       1e-6
                                                            staleness 0
=========  ===============================================  ======================  =========

The baseline of ray / packed / micro / resume is one run (local, padded, no micro-batching,
uninterrupted); the same pairs are what the project's equality tests run. A difference is
|a - b| / max(1, |b|) (absolute for small values, relative for large ones); the table shows the
largest per check and the metric or tensor it came from. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

VOLATILE = (
    "timing_s/",
    "timing_per_token_ms/",
    "perf/",
    "weight_sync/",
    "sync/",
    "global_seqlen/",
    "trainer/",
    "rollouter/",
    "training/off_policy/",
    "memory/",
)
# wall-clock, placement-specific or mode-specific metrics: not expected to agree between paths
DERIVED = ("alarm/", "sentinel/")  # functions of the compared metrics (and of the run's history)
CHECKS = ("ray", "packed", "micro", "resume", "async")
TOLERANCE = {"ray": 1e-5, "packed": 1e-4, "micro": 1e-5, "resume": 0.0, "async": 1e-6}
LABEL = {
    "ray": "local vs 2 Ray workers",
    "packed": "packed vs padded",
    "micro": "micro-batched vs not",
    "resume": "resumed vs uninterrupted",
    "async": "sync vs async (staleness 0)",
}


@dataclass
class CheckResult:
    """One row of the table: the largest difference of a check and where it was."""

    name: str
    max_diff: float
    where: str
    tolerance: float
    compared: int

    @property
    def passed(self) -> bool:
        return self.compared > 0 and self.max_diff <= self.tolerance


@dataclass
class Run:
    """A finished slice run: per-step metrics and the final actor weights."""

    metrics: dict[int, dict[str, float]]
    weights: dict[str, Any]


def slice_overrides(cfg: Any, steps: int, prompts: int) -> list[str]:
    """Overrides turning the user's config into the small common slice of every check."""
    n = cfg.actor_rollout_ref.rollout.n
    # one mini-batch per step: data-parallel ranks each split their own shard into mini-batches, so
    # with several mini-batches 1 and 2 workers would step on different trajectory sets (as in verl)
    mini = prompts
    whole = mini * n  # trajectories of one mini-batch on one process: no micro-batching
    ov = [
        f"trainer.total_training_steps={steps}",
        f"data.train_batch_size={prompts}",
        "data.val_files=[]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.save_freq={steps}",
        "trainer.logger=[]",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        "trainer.resume_mode=auto",
        "trainer.rollout_data_dir=null",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={whole}",
        "actor_rollout_ref.actor.use_dynamic_bsz=false",
        "actor_rollout_ref.actor.calculate_entropy=true",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={whole}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={whole}",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false",
        "actor_rollout_ref.model.use_remove_padding=false",
    ]
    if cfg.critic.enable:
        ov += [
            f"critic.ppo_mini_batch_size={mini}",
            f"critic.ppo_micro_batch_size_per_gpu={whole}",
            "critic.use_dynamic_bsz=false",
            "critic.model.use_remove_padding=false",
        ]
    return ov


def variant_overrides(check: str, cfg: Any, prompts: int) -> list[str]:
    """What one check changes on the slice (see the module docstring)."""
    n = cfg.actor_rollout_ref.rollout.n
    half = max(1, prompts * n // 2)  # the step's one mini-batch split over 2 workers
    if check == "ray":
        ov = [
            "trainer.n_gpus_per_node=2",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={half}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={half}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={half}",
        ]
        return ov + ([f"critic.ppo_micro_batch_size_per_gpu={half}"] if cfg.critic.enable else [])
    if check == "packed":
        return ["actor_rollout_ref.model.use_remove_padding=true"] + (
            ["critic.model.use_remove_padding=true"] if cfg.critic.enable else []
        )
    if check == "micro":
        ov = [
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        ]
        return ov + (["critic.ppo_micro_batch_size_per_gpu=1"] if cfg.critic.enable else [])
    if check == "async":
        return [
            "trainer.v1.trainer_mode=separate_async",
            "trainer.v1.separate_async.parameter_sync_step=1",
            "trainer.v1.separate_async.num_warmup_batches=0",
            "trainer.v1.sampler.max_off_policy_threshold=0",
        ]
    return []


def compare(name: str, base: Run, other: Run, tolerance: float) -> CheckResult:
    """The largest normalised difference between two runs' shared metrics and actor weights."""
    worst, where, compared = 0.0, "", 0
    for step, row in base.metrics.items():
        got = other.metrics.get(step)
        if got is None:
            return CheckResult(name, math.inf, f"step {step} missing", tolerance, compared)
        for k, a in row.items():
            b = got.get(k)
            if (
                k.startswith(VOLATILE + DERIVED)
                or k == "step"
                or not isinstance(a, (int, float))
                or not isinstance(b, (int, float))
            ):
                continue
            d = 0.0 if (math.isnan(a) and math.isnan(b)) else abs(a - b) / max(1.0, abs(b))
            d = math.inf if math.isnan(d) else d
            compared += 1
            if d > worst:
                worst, where = d, f"{k} (step {step})"
    for k, a in base.weights.items():
        b = other.weights.get(k)
        d = math.inf if b is None or b.shape != a.shape else float((a.double() - b.double()).abs().max())
        compared += 1
        if d > worst:
            worst, where = d, f"weight {k}"
    return CheckResult(name, worst, where or "-", tolerance, compared)


def _train(config: str | None, overrides: list[str], run_dir: Path, stop_after: int | None = None) -> Run:
    """Train one slice run in ``run_dir``; ``stop_after`` ends it early (after a checkpoint) to test resuming."""
    from safetensors.torch import load_file

    from verl.config import load_config
    from verl.trainer.ppo.trainer import RLTrainer

    cfg = load_config(
        config, [*overrides, f"trainer.output_dir={run_dir / 'out'}", f"trainer.default_local_dir={run_dir / 'ckpt'}"]
    )
    trainer = RLTrainer(config=cfg)
    if stop_after is not None:
        trainer._parts().total_training_steps = stop_after  # the schedule keeps the full run's length
    history = trainer.fit()
    steps = sorted(p.name for p in (run_dir / "ckpt").glob("global_step_*"))
    weights = load_file(str(run_dir / "ckpt" / steps[-1] / "actor" / "model.safetensors")) if steps else {}
    return Run({int(r["step"]): r for r in history if "step" in r}, weights)


def run_checks(
    config: str | None,
    overrides: list[str],
    checks: list[str],
    steps: int,
    prompts: int,
    work: Path,
    echo: Callable[[str], None] = print,
) -> list[CheckResult]:
    """Run the baseline and every check's variant; returns one `CheckResult` per check.

    Raises:
        ConfigError: a check name that is not one of `CHECKS`, or fewer than 2 steps with ``resume``.
    """
    from verl.config import ConfigError, load_config

    bad = [c for c in checks if c not in CHECKS]
    if bad:
        raise ConfigError(f"verl verify --checks: unknown {bad}; choose from {', '.join(CHECKS)}")
    if "resume" in checks and steps < 2:
        raise ConfigError("verl verify --steps: resume needs at least 2 steps")
    cfg = load_config(config, overrides)
    base_ov = [*overrides, *slice_overrides(cfg, steps, prompts)]
    tolerance = dict(TOLERANCE)
    if cfg.trainer.device != "cpu":
        tolerance["resume"] = 1e-5  # GPU kernels are not bitwise reproducible across processes
    results, base = [], None
    for check in checks:
        if check != "async" and base is None:
            echo(
                f"verl verify: baseline ({steps} steps of {prompts} prompts x n={cfg.actor_rollout_ref.rollout.n}) ..."
            )
            base = _train(config, base_ov, work / "base")
        echo(f"verl verify: {LABEL[check]} ...")
        if check == "resume":
            _train(config, base_ov, work / "resume", stop_after=1)
            other, ref = _train(config, base_ov, work / "resume"), base
            other.metrics = {s: r for s, r in other.metrics.items() if s > 1}
            ref = Run({s: r for s, r in base.metrics.items() if s > 1}, base.weights)
        elif check == "async":
            split = [*base_ov, "actor_rollout_ref.hybrid_engine=false"]
            ref = _train(config, split, work / "sync_split")
            other = _train(config, [*split, *variant_overrides("async", cfg, prompts)], work / "async")
        else:
            ref, other = base, _train(config, [*base_ov, *variant_overrides(check, cfg, prompts)], work / check)
        results.append(compare(check, ref, other, tolerance[check]))
    return results


def format_table(results: list[CheckResult]) -> str:
    """The pass/fail table `main` prints."""
    lines = [f"{'check':<29} {'values':>6} {'max diff':>10} {'tolerance':>10}  {'result':<6} worst at", "-" * 96]
    for r in results:
        lines.append(
            f"{LABEL[r.name]:<29} {r.compared:>6} {r.max_diff:>10.3g} {r.tolerance:>10.3g}  "
            f"{'pass' if r.passed else 'FAIL':<6} {r.where}"
        )
    failed = [LABEL[r.name] for r in results if not r.passed]
    lines.append(f"FAILED: {', '.join(failed)}" if failed else f"all {len(results)} checks pass")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``verl verify [CONFIG] [key=value ...] [--checks a,b] [--steps N] [--prompts P] [--workdir DIR]``."""
    from verl.config.cli import DEFAULT_CONFIG, split_config_arg

    ap = argparse.ArgumentParser(prog="verl verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("args", nargs="*", help="[CONFIG] [key=value ...] (default: the built-in quick start)")
    ap.add_argument(
        "--checks",
        default=",".join(c for c in CHECKS if c != "async" or _async_available()),
        help=f"comma-separated subset of {', '.join(CHECKS)}",
    )
    ap.add_argument("--steps", type=int, default=2, help="RL steps per run (>= 2 for resume)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step (even)")
    ap.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args(argv)
    config, overrides = split_config_arg(args.args, DEFAULT_CONFIG)
    checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="verl_verify_") as tmp:
        work = Path(args.workdir or tmp)
        results = run_checks(
            config,
            overrides,
            checks,
            args.steps,
            args.prompts,
            work,
            echo=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(format_table(results))
    return 0 if all(r.passed for r in results) else 1


def _async_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("verl.trainer.async_rl") is not None
