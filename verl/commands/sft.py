"""``verl sft`` / ``verl dpo`` / hybrid: one actor trained on supervised task streams over the `TrainingEngine`.

``fit()`` reads like the algorithm: for each optimizer step, every task stream takes its next
batch (`verl.trainer.supervised.streams`), precomputes what its loss needs without gradient (DPO:
the reference log-probs, once per batch; RL: rollouts, rewards, advantages), and then each
stream's micro-batches run ``forward_backward`` with its loss scaled by its normalised weight,
followed by one ``optimizer_step`` and one ``lr_scheduler_step``. The gradient of a step is
therefore exactly ``Σ_i w_i ∇L_i`` with ``w_i = task_weights[i] / Σ task_weights`` (equal
weights when none are given), each ``L_i`` normalised by that stream's *global* counts (SFT:
response tokens; DPO: pairs; RL: response tokens), so micro-batching and the number of ranks
never change it. SFT and DPO are the one-stream cases (weight 1).

Runs in one process or under ``torchrun --nproc_per_node=N`` (gloo on CPU, nccl on GPU; FSDP2
shards the model when N > 1). Checkpoints are atomic (`verl.run.checkpoint`): each
``global_step_N`` holds a Hugging Face model + tokenizer at its top (LoRA merged; loadable by
``from_pretrained`` and usable as ``actor_rollout_ref.model.path`` of ``verl train``), the
engine state in ``actor/`` and ``trainer_state.json``; resuming restores the engine and
continues at the next step with the same data (the samplers are functions of the step).

Two key layouts: verl's older ``fsdp_sft_trainer`` one (`verl.config.sft_schema`) and verl's current
``sft_trainer_engine.yaml`` (``model.path``, ``data.messages_key``, ``engine=fsdp``, ``optim.*``,
``checkpoint.*``), recognised by its keys and mapped onto the same loop with verl's defaults of that
layout (`verl.config.sft_engine_layout`). ``python -m verl.trainer.sft_trainer_ray`` runs the same
loop on Ray workers.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Sequence

import torch

from verl.engine.dist import dp_rank, dp_world_size
from verl.trainer.supervised.trainer import SupervisedTrainer

__all__ = ["SupervisedTrainer", "main", "run", "train_sft"]

logger = logging.getLogger(__name__)


USAGE = """usage: verl sft [CONFIG] [key=value | +key=value | ~key ...]
       verl dpo [CONFIG] [key=value ...]
       torchrun --nproc_per_node=N -m verl.trainer.sft_trainer [CONFIG] [key=value ...]
       torchrun --nproc_per_node=N -m verl.trainer.fsdp_sft_trainer [CONFIG] [key=value ...]

  CONFIG   a YAML file with verl's SFT keys (data.*, model.partial_pretrain, optim.*, trainer.*,
           dpo.*, hybrid.tasks); trainer.algorithm: sft | dpo | hybrid (verl dpo defaults to dpo)
  or verl's sft_trainer_engine.yaml keys (model.path, data.messages_key, data.tools_key, engine=fsdp,
           engine.*, optim.lr_scheduler_type, checkpoint.save_contents, ...; rows are chat messages)
  The last checkpoint directory (trainer.default_local_dir/global_step_N) is a Hugging Face model.
"""


def init_distributed(device: str) -> None:
    """Join the torchrun process group when launched with WORLD_SIZE > 1 (gloo on CPU, nccl on GPU)."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")


def train_sft(
    overrides: Sequence[str], config_path: str | None = None
) -> tuple[SupervisedTrainer, list[dict[str, float]]]:
    """Run an SFT job in this process (no CLI): load, build, fit.

    Args:
        overrides: dotted overrides on the schema defaults (or on ``config_path``).
        config_path: optional YAML file.

    Returns:
        (trainer, per-step metrics); the final model is ``<default_local_dir>/global_step_<N>``.
    """
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.supervised.builders import build_supervised_trainer

    trainer = build_supervised_trainer(load_sft_config(config_path, overrides, algorithm="sft"))
    return trainer, trainer.fit()


def run(config_path: str | None, overrides: Sequence[str], algorithm: str = "sft") -> list[dict[str, float]]:
    """Load the config, build and fit; returns the per-step metrics."""
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.supervised.builders import build_supervised_trainer

    cfg = load_sft_config(config_path, overrides, algorithm=algorithm)
    init_distributed(cfg.trainer.device)
    declared = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    if declared not in (1, dp_world_size()):
        # as in verl's SFT trainer the process group (torchrun) decides the world size
        logger.warning(
            "trainer.nnodes x n_gpus_per_node = %d but torchrun started %d ranks; using %d",
            declared,
            dp_world_size(),
            dp_world_size(),
        )
    trainer = build_supervised_trainer(cfg)
    history = trainer.fit()
    if dp_rank() == 0 and history:
        print(
            f"final checkpoint: {Path(cfg.trainer.default_local_dir) / f'global_step_{trainer.global_step}'}",
            flush=True,
        )
    return history


def main(argv: Sequence[str] | None = None, algorithm: str = "sft") -> int:
    """``verl sft`` (``algorithm="sft"``) / ``verl dpo`` (``"dpo"``); returns the exit status.

    Errors go through the one CLI error path, `verl.utils.errors.run_reporting_user_errors` (a config
    error is one line ``verl sft: config error: ...``, exit status 2, as for ``verl train``).
    """
    from verl.utils.errors import run_reporting_user_errors
    from verl.config.cli import config_command

    def body(config_path: str | None, overrides: list[str]) -> int:
        try:
            run(config_path, overrides, algorithm)
        finally:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        return 0

    prog = f"verl {algorithm}"
    return run_reporting_user_errors(
        prog, lambda args: config_command(args, USAGE, prog, body), sys.argv[1:] if argv is None else argv
    )


def dpo_main(argv: Sequence[str] | None = None) -> int:
    """``verl dpo [CONFIG] [overrides]``."""
    return main(argv, algorithm="dpo")


if __name__ == "__main__":
    sys.exit(main())
