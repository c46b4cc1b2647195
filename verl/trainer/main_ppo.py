"""``verl train`` / ``python -m verl.trainer.main_ppo``: load a config and run RL.

``verl train`` with no arguments runs the built-in quick start (preset ``quickstart``: a tiny
built-in model on the built-in arithmetic task, no download); it prints held-out greedy
accuracy at the start and at the end of RL and writes ``reward_accuracy.png`` into
``trainer.output_dir``. Otherwise the first argument, when it does not contain ``=``, is a YAML
file or preset name, and the rest are dotted overrides (``a.b=c``, ``+a.b=c``, ``~a.b``).
A bad config exits with status 2 and a one-line error before any model is loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence


def parse_args(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Split ``[CONFIG] [overrides...]``; no arguments at all selects the ``quickstart`` preset."""
    argv = list(argv)
    if not argv:
        return "quickstart", []
    if "=" not in argv[0] and not argv[0].startswith(("+", "~")):
        return argv[0], argv[1:]
    return None, argv


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


def report(history: list[dict[str, Any]], cfg: Any) -> None:
    """Print held-out accuracy at the start and the end, and write the plot."""
    accs = [(h["step"], h["val/accuracy"]) for h in history if "val/accuracy" in h]
    if accs:
        (s0, a0), (s1, a1) = accs[0], accs[-1]
        print(f"held-out accuracy at step {s0}: {a0:.1%}", flush=True)
        print(f"held-out accuracy at step {s1}: {a1:.1%} ({(a1 - a0) * 100:+.1f} points)", flush=True)
    if cfg.trainer.plot and history:
        png = plot_history(history, Path(cfg.trainer.output_dir) / "reward_accuracy.png")
        if png is not None:
            print(f"plot written to {png}", flush=True)


def run(config_path: str | None, overrides: Sequence[str]) -> list[dict[str, Any]]:
    """Load the config, train, report; returns the per-step metrics."""
    from verl.config import load_config
    from verl.trainer.rl_trainer import RLTrainer

    cfg = load_config(config_path, overrides)
    trainer = RLTrainer(config=cfg)
    history = trainer.fit()
    report(history, cfg)
    return history


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``verl train``; returns the exit status."""
    from verl.config import ConfigError

    config_path, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(config_path, overrides)
    except ConfigError as e:
        print(f"verl train: config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("verl train: interrupted", file=sys.stderr)
        return 130
    finally:
        _shutdown_ray()
    return 0


def _shutdown_ray() -> None:
    """Stop Ray if this process started it, so no worker process outlives the driver."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
