"""``python -m verl.trainer.sft_trainer_ray [CONFIG] key=value ...``: the SFT trainer on Ray workers (verl's path).

Same keys as ``torchrun -m verl.trainer.sft_trainer`` (verl's ``sft_trainer_engine`` layout or the
older ``fsdp_sft_trainer`` one). Instead of torchrun, ``trainer.nnodes x trainer.n_gpus_per_node``
Ray actors are started in one placement group (one per device; one CPU slot each on CPU), joined
into one process group (gloo on CPU, nccl on CUDA) and each runs the same SPMD loop
(`verl.trainer.supervised.trainer.SupervisedTrainer`), so the losses equal the torchrun run's with as many
processes. Rank 0 writes the checkpoints and metrics; the command prints the final checkpoint.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from verl.single_controller.base import Dispatch, Worker, register

__all__ = ["SFTRayWorker", "main", "run_on_ray"]

USAGE = """usage: python -m verl.trainer.sft_trainer_ray [CONFIG] [key=value ...]

  The keys of torchrun -m verl.trainer.sft_trainer; the world size is trainer.nnodes x trainer.n_gpus_per_node.
"""


class SFTRayWorker(Worker):
    """One rank of the SFT run (the process group is joined by `Worker.__init__`)."""

    @register(Dispatch.ONE_TO_ALL)
    def fit(self, config_path: str | None, overrides: list[str]) -> list[dict[str, float]]:
        """Load the config, build and fit on this rank; returns the per-step metrics."""
        from verl.commands.sft import run

        return run(config_path, overrides)


def run_on_ray(config_path: str | None, overrides: Sequence[str]) -> list[dict[str, float]]:
    """Run the SFT job on ``nnodes x n_gpus_per_node`` Ray workers; returns rank 0's per-step metrics.

    Raises:
        ConfigError: a bad config (checked here, before any worker starts).
        WorkerError: a worker failed (naming its rank and error).
    """
    from verl.config.sft_loader import load_sft_config
    from verl.single_controller.ray import RayWorkerGroup, ensure_ray

    cfg = load_sft_config(config_path, overrides, algorithm="sft")
    t = cfg.trainer
    world = t.nnodes * t.n_gpus_per_node
    ensure_ray(num_cpus=max(world, 1) if t.device == "cpu" else None)
    group: Any = RayWorkerGroup(SFTRayWorker, world, t, t.device, role="sft")
    try:
        return group.fit(config_path, list(overrides))[0]
    finally:
        group.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """Returns the exit status: 0, 2 for a config error, 1 for a failed worker.

    Errors go through the one CLI error path, `verl.utils.errors.run_reporting_user_errors`
    (``sft_trainer_ray: config error: ...``, as every command prints a config error).
    """
    from verl.config.cli import config_command
    from verl.single_controller.ray import WorkerError
    from verl.utils.errors import run_reporting_user_errors

    def body(config_path: str | None, overrides: list[str]) -> int:
        try:
            run_on_ray(config_path, overrides)
        except WorkerError as e:
            print(f"sft_trainer_ray: {e}", file=sys.stderr)
            return 1
        return 0

    return run_reporting_user_errors(
        "sft_trainer_ray",
        lambda args: config_command(args, USAGE, "sft_trainer_ray", body),
        sys.argv[1:] if argv is None else argv,
    )


if __name__ == "__main__":
    sys.exit(main())
