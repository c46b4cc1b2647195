"""``verl train`` / ``python -m verl.trainer.main_ppo``: load a config and run RL.

``verl train`` with no arguments runs the built-in quick start (preset ``quickstart``: a tiny
built-in model on the built-in arithmetic task, no download); it prints held-out greedy
accuracy at the start and at the end of RL and writes ``reward_accuracy.png`` into
``trainer.output_dir``. Otherwise the first argument, when it does not contain ``=``, is a YAML
file or preset name, and the rest are dotted overrides (``a.b=c``, ``+a.b=c``, ``~a.b``); with
overrides only, ``verl train`` modifies the quick start (so ``verl train trainer.n_gpus_per_node=2``
is the quick start on two workers), while ``python -m verl.trainer.main_ppo`` — verl's own entry
point — applies them to verl's schema defaults, as verl's scripts expect; it also takes Hydra's
``--config-path DIR --config-name NAME`` as verl's multi-turn recipes use it.
A bad config exits with status 2 and a one-line error before any model is loaded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

USAGE = """usage: verl train [CONFIG] [key=value | +key=value | ~key ...]

  (no arguments)          the built-in quick start (preset 'quickstart': tiny model, arithmetic task, CPU)
  CONFIG                  a YAML file (canonical verl keys or the seed layout) or a preset name:
                          quickstart, calculator (multi-turn tool calling), gsm8k_grpo, gsm8k_ppo, math_grpo
  key=value ...           dotted overrides (a.b=c, +a.b=c, ~a.b); with no CONFIG they modify the
                          quick start. `python -m verl.trainer.main_ppo key=value ...` (verl's own
                          entry point) applies them to verl's defaults instead.
  --config-path DIR --config-name NAME    Hydra-style, as verl's recipes call main_ppo: the YAML
                          DIR/NAME.yaml (its `defaults: [ppo_trainer, _self_]` = verl's defaults)
  verl config show [CONFIG] [overrides]   prints the resolved config
"""


def plot_history(history: list[dict[str, float]], out_png: Path) -> Path | None:
    """PNG of the mean training score and the held-out accuracy over steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history if "critic/score/mean" in h]
    scores = [h["critic/score/mean"] for h in history if "critic/score/mean" in h]
    val_steps = [h["step"] for h in history if "val/accuracy" in h]
    accs = [h["val/accuracy"] for h in history if "val/accuracy" in h]
    if not steps and not val_steps:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, scores, label="train reward (critic/score/mean)")
    ax.plot(val_steps, accs, marker="o", label="held-out greedy accuracy (val/accuracy)")
    ax.set_xlabel("RL step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def full_history(history: list[dict[str, Any]], cfg: Any) -> list[dict[str, Any]]:
    """The run's metrics from ``metrics.jsonl`` (which spans resumes), else this process's."""
    path = Path(cfg.trainer.output_dir) / "metrics.jsonl"
    if "jsonl" in cfg.trainer.logger and path.is_file():
        import json

        by_step: dict[int, dict[str, Any]] = {}
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                by_step.setdefault(int(row["step"]), {}).update(row)
        return [by_step[k] for k in sorted(by_step)]
    return history


def report(history: list[dict[str, Any]], cfg: Any) -> None:
    """Print held-out accuracy (mean score when scores are not 0/1) at the start and the end, and plot."""
    history = full_history(history, cfg)
    accs = [(h["step"], h["val/accuracy"]) for h in history if "val/accuracy" in h]
    if len(accs) >= 2:
        (s0, a0), (s1, a1) = accs[0], accs[-1]
        binary = all(0.0 <= a <= 1.0 for _, a in accs)
        name, fmt = ("held-out accuracy", "{:.1%}") if binary else ("held-out mean score", "{:.4g}")
        delta = f"{(a1 - a0) * 100:+.1f} points" if binary else f"{a1 - a0:+.4g}"
        print(f"{name} at step {s0}: {fmt.format(a0)}", flush=True)
        print(f"{name} at step {s1}: {fmt.format(a1)} ({delta})", flush=True)
    if cfg.trainer.plot and history:
        png = plot_history(history, Path(cfg.trainer.output_dir) / "reward_accuracy.png")
        if png is not None:
            print(f"plot written to {png}", flush=True)


def run(config_path: str | None, overrides: Sequence[str]) -> list[dict[str, Any]]:
    """Load the config, train, report; returns the per-step metrics."""
    from verl.config import load_config
    from verl.trainer.ppo.trainer import RLTrainer

    start = time.perf_counter()
    cfg = load_config(config_path, overrides)
    trainer = RLTrainer(config=cfg)
    history = trainer.fit()
    report(history, cfg)
    print(f"done in {time.perf_counter() - start:.1f} s (config, models, training, validation and report)", flush=True)
    return history


def main(argv: Sequence[str] | None = None, default_config: str | None = None) -> int:
    """Entry point of ``python -m verl.trainer.main_ppo`` (verl's: overrides apply to verl's
    defaults) and, through `train_cli`, of ``verl train``; returns the exit status.

    Errors go through the one CLI error path, `verl.utils.errors.run_reporting_user_errors` (a config
    error is one line ``verl train: config error: ...``, exit status 2); ``--debug`` or
    ``VERL_DEBUG=1`` shows the traceback.
    """
    import os

    from verl.utils.errors import run_reporting_user_errors
    from verl.config.cli import split_config_arg

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        argv.remove("--debug")
        os.environ["VERL_DEBUG"] = "1"
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0

    def body(args: list[str]) -> int:
        hydra_path, args = hydra_config_args(args)
        config_path, overrides = (hydra_path, args) if hydra_path else split_config_arg(args, default_config)
        run(config_path, overrides)
        return 0

    try:
        return run_reporting_user_errors("verl train", body, argv)
    finally:
        _shutdown_ray()


def hydra_config_args(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Hydra's ``--config-path DIR --config-name NAME`` (also ``=`` forms, ``-cp`` / ``-cn``), as
    verl's recipes call ``python -m verl.trainer.main_ppo``.

    Returns:
        (``DIR/NAME.yaml`` or None when neither flag is given, the remaining arguments).

    Raises:
        ConfigError: a flag without its value, or ``--config-path`` without ``--config-name``.
    """
    from verl.config import ConfigError

    names = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}
    found: dict[str, str] = {}
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in names:
            if not eq:
                if i + 1 >= len(args):
                    raise ConfigError(f"{flag} needs a value")
                value, i = args[i + 1], i + 1
            found[names[flag]] = value
        else:
            rest.append(args[i])
        i += 1
    if not found:
        return None, rest
    if "name" not in found:
        raise ConfigError("--config-path needs --config-name (the YAML file name without .yaml)")
    name = found["name"] if found["name"].endswith((".yaml", ".yml")) else found["name"] + ".yaml"
    return str(Path(found.get("path", ".")) / name), rest


def train_cli(argv: Sequence[str] | None = None) -> int:
    """``verl train [CONFIG] [overrides]``: without CONFIG, the built-in quick start + overrides."""
    from verl.config.cli import DEFAULT_CONFIG

    return main(argv, default_config=DEFAULT_CONFIG)


def _shutdown_ray() -> None:
    """Stop Ray if this process started it, so no worker process outlives the driver."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
