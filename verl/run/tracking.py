"""Metric loggers: console, JSONL, TensorBoard, wandb (offline without credentials), mlflow when installed.

`Tracking.log(metrics, step)` fans out to every configured backend. The JSONL file
(``<output_dir>/metrics.jsonl``, one object per step with ``"step"``) is the machine-readable
record used by tests and plots. `progress_bar` / `update_bar`: the tqdm bar over RL steps
(``trainer.progress_bar``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

_KNOWN = ("console", "jsonl", "tensorboard", "wandb", "mlflow", "file")


class Tracking:
    """Fan-out metric logger.

    Args:
        loggers: any of console | jsonl | tensorboard | wandb | mlflow.
        output_dir: where jsonl and TensorBoard files go.
        project_name, experiment_name: run identity for wandb / mlflow.
        config: resolved config as a plain dict (sent to wandb / mlflow).

    Raises:
        ValueError: an unknown logger name; ImportError: wandb / mlflow requested but missing.
    """

    def __init__(
        self,
        loggers: list[str],
        output_dir: str | Path,
        project_name: str = "verl",
        experiment_name: str = "run",
        config: dict | None = None,
    ) -> None:
        unknown = [x for x in loggers if x not in _KNOWN]
        if unknown:
            raise ValueError(f"unknown logger(s) {unknown}; valid: {list(_KNOWN)}")
        self.loggers = list(loggers)
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.output_dir / "metrics.jsonl", "a") if "jsonl" in loggers else None
        self._tb = None
        if "tensorboard" in loggers:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.output_dir / "tensorboard"))
        self._wandb = self._mlflow = None
        self._file = None
        if "file" in loggers:  # verl's FileLogger (see verl.run.file_logger)
            from verl.run.file_logger import FileLogger

            self._file = FileLogger(project_name, experiment_name)
        if "wandb" in loggers:
            self._wandb = _init_wandb(project_name, experiment_name, config or {}, self.output_dir)
        if "mlflow" in loggers:
            import mlflow

            mlflow.set_experiment(project_name)
            mlflow.start_run(run_name=experiment_name)
            self._mlflow = mlflow

    def start_fresh(self) -> None:
        """A run that did not resume: drop metrics an earlier run left in the JSONL file."""
        self.keep_until(-1)

    def keep_until(self, step: int) -> None:
        """Drop JSONL records after ``step`` (a resumed run re-does the steps after its checkpoint).

        The kept rows are written to a temporary file, fsync'ed and renamed over
        ``metrics.jsonl`` (then the directory is fsync'ed): a kill at any point leaves either the
        old file or the new one, never a truncated history. A torn last line (a kill while a
        row was being appended) is dropped.
        """
        if self._jsonl is None:
            return
        path = self.output_dir / "metrics.jsonl"
        self._jsonl.close()
        kept = [
            line for line in path.read_text().splitlines() if _row_step(line) is not None and _row_step(line) <= step
        ]
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            f.write("".join(f"{line}\n" for line in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.output_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._jsonl = open(path, "a")

    def log(self, data: dict[str, Any], step: int) -> None:
        """Record `data` (name -> number) at `step`."""
        clean = {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
        if self._jsonl is not None:
            row = {"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in clean.items()}}
            self._jsonl.write(json.dumps(row) + "\n")
            self._jsonl.flush()
            os.fsync(self._jsonl.fileno())  # durable before the step's checkpoint is published
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if "console" in self.loggers:
            shown = " - ".join(f"{k}:{v:.4g}" for k, v in sorted(clean.items()))
            print(f"step:{step} - {shown}", flush=True)
        if self._file is not None:
            self._file.log(clean, step)
        if self._wandb is not None:
            self._wandb.log(clean, step=step)
        if self._mlflow is not None:
            self._mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in clean.items()}, step=step)

    def close(self) -> None:
        """Flush and close every backend."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._mlflow is not None:
            self._mlflow.end_run()
            self._mlflow = None


def wandb_credentials() -> bool:
    """Whether W&B can authenticate: ``WANDB_API_KEY`` / ``WANDB_IDENTITY_TOKEN_FILE`` or a netrc entry.

    The netrc file is ``$NETRC`` or ``~/.netrc`` (where ``wandb login`` writes the key); the entry is
    the host of ``WANDB_BASE_URL`` (default ``https://api.wandb.ai``).
    """
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _init_wandb(project: str, name: str, config: dict, output_dir: Path) -> Any:
    """``wandb.init`` that never stops a run: offline without credentials or when going online fails.

    ``WANDB_MODE`` (online | offline | disabled), when set, is obeyed as is. Otherwise a run without
    credentials (`wandb_credentials`) logs offline, and so does one whose online start fails (no
    network, a refused key); either case is said once, on one line, with the run directory and the
    ``wandb sync`` command that uploads it later. Files go to ``$WANDB_DIR`` (default: the run's
    ``output_dir``), under ``wandb/``.

    Returns:
        The ``wandb.sdk.wandb_run.Run``.
    """
    import wandb

    kwargs = {"project": project, "name": name, "config": config, "dir": os.environ.get("WANDB_DIR") or str(output_dir)}
    Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
    why = None
    if os.environ.get("WANDB_MODE") is None:
        if not wandb_credentials():
            why = "no W&B credentials (WANDB_API_KEY, ~/.netrc)"
        else:
            try:
                return wandb.init(**kwargs)
            except Exception as e:  # noqa: BLE001 - a logger must not stop the run: fall back to offline
                why = f"online start failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        run = wandb.init(mode="offline", **kwargs)
        sync_dir = run.settings.sync_dir
        print(f"wandb: {why}: logging offline to {sync_dir}; upload it later with `wandb sync {sync_dir}`", flush=True)
        return run
    return wandb.init(**kwargs)


def _row_step(line: str) -> int | None:
    """The ``step`` of one JSONL line; None for a blank or torn (partially written) line."""
    if not line.strip():
        return None
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def progress_bar(enabled: bool, total: int, initial: int) -> Any:
    """A tqdm bar over the RL steps (``trainer.progress_bar``), or None when disabled."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="RL steps", dynamic_ncols=True)


def update_bar(bar: Any, metrics: dict[str, float]) -> None:
    """Advance the bar by one step, showing the score, validation accuracy, loss, length and step time."""
    if bar is None:
        return
    keys = {
        "score": "critic/score/mean",
        "acc": "val/accuracy",
        "pg": "actor/pg_loss",
        "len": "response_length/mean",
        "s/step": "timing_s/step",
    }
    bar.set_postfix({k: f"{metrics[v]:.3g}" for k, v in keys.items() if v in metrics}, refresh=False)
    bar.update(1)
