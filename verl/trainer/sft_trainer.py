"""``verl sft`` / ``verl dpo`` / hybrid: one actor trained on supervised task streams over the `TrainingEngine`.

``fit()`` reads like the algorithm: for each optimizer step, every task stream takes its next
batch (`verl.trainer.hybrid_streams`), precomputes what its loss needs without gradient (DPO:
the reference log-probs, once per batch; RL: rollouts, rewards, advantages), and then each
stream's micro-batches run ``forward_backward`` with its loss scaled by its normalised weight,
followed by one ``optimizer_step`` and one ``lr_scheduler_step``. The gradient of a step is
therefore exactly ``Σ_i w_i ∇L_i`` with ``w_i = task_weights[i] / Σ task_weights`` (equal
weights when none are given), each ``L_i`` normalised by that stream's *global* counts (SFT:
response tokens; DPO: pairs; RL: response tokens), so micro-batching and the number of ranks
never change it. SFT and DPO are the one-stream cases (weight 1).

Runs in one process or under ``torchrun --nproc_per_node=N`` (gloo on CPU, nccl on GPU; FSDP2
shards the model when N > 1). Checkpoints are atomic (`verl.trainer.checkpoint`): each
``global_step_N`` holds a Hugging Face model + tokenizer at its top (LoRA merged; loadable by
``from_pretrained`` and usable as ``actor_rollout_ref.model.path`` of ``verl train``), the
engine state in ``actor/`` and ``trainer_state.json``; resuming restores the engine and
continues at the next step with the same data (the samplers are functions of the step).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

import torch

from verl.config.sft_schema import SFTRootConfig
from verl.engine.dist import barrier, dp_rank, dp_world_size, sum_floats
from verl.protocol import DataProto
from verl.trainer.checkpoint import CheckpointManager, step_of

__all__ = ["SupervisedTrainer", "main", "run", "train_sft"]

logger = logging.getLogger(__name__)


class SupervisedTrainer:
    """The supervised training loop (see the module docstring). Build it with `build_supervised_trainer`.

    Args:
        config: the validated root config.
        engine: the actor's `TrainingEngine`.
        streams: task streams (``sft`` / ``dpo`` / ``rl``), in ``task_weights`` order.
        weights: normalised weights, one per stream, summing to 1.
        tokenizer: saved beside every Hugging Face export.
        total_steps: optimizer steps of the run.
        validator: ``validator() -> metrics`` (validation loss etc.), or None.
        export_hf: ``export_hf(out_dir)`` writes the current model as a Hugging Face directory (collective).
    """

    def __init__(self, config: SFTRootConfig, engine: Any, streams: list[Any], weights: list[float], tokenizer: Any,
                 total_steps: int, validator: Any = None, export_hf: Any = None) -> None:
        self.config, self.engine, self.streams, self.weights = config, engine, streams, weights
        self.tokenizer, self.total_steps, self.validator, self.export_hf = tokenizer, total_steps, validator, export_hf
        self.rank, self.world_size = dp_rank(), dp_world_size()
        t = config.trainer
        self.ckpt = CheckpointManager(t.default_local_dir, t.max_ckpt_to_keep)
        self.tracker: Any = None
        self.global_step = 0

    # --------------------------------------------------------------------------------- loop
    def fit(self) -> list[dict[str, float]]:
        """Train from the latest checkpoint (or from scratch) to ``total_steps``; returns the metrics per step."""
        t = self.config.trainer
        self._open_tracker()
        self.global_step = self._restore()
        history: list[dict[str, float]] = []
        while self.global_step < self.total_steps:
            self.global_step += 1
            metrics = self.train_step(self.global_step)
            last = self.global_step == self.total_steps
            if self.validator is not None and (last or (t.test_freq > 0 and self.global_step % t.test_freq == 0)):
                metrics.update(self.validator())
            if last or (t.save_freq > 0 and self.global_step % t.save_freq == 0):
                self.save_checkpoint()
            history.append({"step": self.global_step, **metrics})
            if self.tracker is not None:
                self.tracker.log(metrics, self.global_step)
        if self.tracker is not None:
            self.tracker.close()
        return history

    def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step over every stream (see the module docstring); returns its metrics."""
        start = time.perf_counter()
        prepared, metrics = [], {}
        for stream in self.streams:
            batch, extra = stream.prepare(stream.batch(step, self.rank, self.world_size), step)
            prepared.append(batch)
            if extra:  # per-rank means (equal row counts per rank) -> global means
                extra = {k: v / self.world_size for k, v in sum_floats(extra).items()}
            metrics.update(self._named(stream, extra))
        on_device = getattr(self.engine, "on_device", None)  # offload-aware engines bring weights in once per step
        with on_device() if on_device is not None else nullcontext():
            self.engine.module.train()
            for stream, weight, batch in zip(self.streams, self.weights, prepared):
                metrics.update(self._named(stream, self._accumulate(stream, weight, batch)))
            grad_norm, stepped = self.engine.optimizer_step()
        metrics["train/lr"] = self.engine.lr_scheduler_step()
        metrics["train/grad_norm"] = grad_norm
        metrics["train/grad_norm_nonfinite"] = 0.0 if stepped else 1.0
        if len(self.streams) > 1:
            metrics["train/loss"] = sum(w * metrics[f"hybrid/{s.name}/loss"] for s, w in zip(self.streams, self.weights))
        metrics["timing_s/step"] = time.perf_counter() - start
        return metrics

    def _accumulate(self, stream: Any, weight: float, batch: DataProto) -> dict[str, float]:
        """Gradient of ``weight · L_stream`` accumulated micro-batch by micro-batch; metrics summed over ranks."""
        from verl.engine.micro_batches import split_micro_batches

        counts = self.engine.global_counts(batch, stream.mask_key)
        micros, _ = split_micro_batches(batch, stream.micro.size, stream.micro.dynamic, stream.micro.max_token_len)
        sums: dict[str, float] = {}
        for m in micros:
            for k, v in self.engine.forward_backward(m, stream.loss_fn(weight), counts).items():
                sums[k] = sums.get(k, 0.0) + v
        return sum_floats(sums)

    def _named(self, stream: Any, metrics: dict[str, float]) -> dict[str, float]:
        """``train/<k>`` for one stream (``rewards/*``, ``logps/*`` unprefixed, as TRL), ``hybrid/<task>/<k>`` for several."""
        if len(self.streams) > 1:
            return {f"hybrid/{stream.name}/{k}": v for k, v in metrics.items()}
        return {k if k.startswith(("rewards/", "logps/", "rl/")) else f"train/{k}": v for k, v in metrics.items()}

    # ---------------------------------------------------------------------- checkpoint / log
    def save_checkpoint(self) -> Path:
        """Publish ``global_step_N`` atomically (collective: every rank calls it)."""
        from verl.config.sft_loader import sft_config_to_yaml

        step = self.global_step
        tmp = self.ckpt.root / f".tmp_global_step_{step}"

        def write(tmp_dir: Path) -> None:
            barrier()  # the other ranks wait here until rank 0 has created tmp_dir
            self._write_state(tmp_dir)
            (tmp_dir / "sft_config.yaml").write_text(sft_config_to_yaml(self.config))
            (tmp_dir / "trainer_state.json").write_text(json.dumps({"global_step": step, "total_steps": self.total_steps}))

        if self.rank == 0:
            final = self.ckpt.save(step, write)
        else:
            barrier()
            self._write_state(tmp)
            final = self.ckpt.root / f"global_step_{step}"
        barrier()
        return final

    def _write_state(self, tmp_dir: Path) -> None:
        self.engine.save(str(tmp_dir / "actor"))
        if self.export_hf is not None:
            self.export_hf(tmp_dir)

    def _restore(self) -> int:
        t = self.config.trainer
        path = self.ckpt.find_resume(t.resume_mode, t.resume_from_path)
        if path is None:
            if self.tracker is not None:
                self.tracker.start_fresh()
            return 0
        self.engine.load(str(path / "actor"))
        step = step_of(path)
        if self.tracker is not None:
            self.tracker.keep_until(step)
        if self.rank == 0:
            print(f"resumed from {path} (step {step})", flush=True)
        return step

    def _open_tracker(self) -> None:
        from verl.config.sft_loader import sft_config_to_yaml
        from verl.trainer.tracking import Tracking

        t = self.config.trainer
        if self.rank != 0:
            return
        out = Path(t.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(sft_config_to_yaml(self.config))
        self.tracker = Tracking(t.logger, out, t.project_name, t.experiment_name)


# -------------------------------------------------------------------------------------- CLI
USAGE = """usage: verl sft [CONFIG] [key=value | +key=value | ~key ...]
       verl dpo [CONFIG] [key=value ...]
       torchrun --nproc_per_node=N -m verl.trainer.fsdp_sft_trainer [CONFIG] [key=value ...]

  CONFIG   a YAML file with verl's SFT keys (data.*, model.partial_pretrain, optim.*, trainer.*,
           dpo.*, hybrid.tasks); trainer.algorithm: sft | dpo | hybrid (verl dpo defaults to dpo)
  The last checkpoint directory (trainer.default_local_dir/global_step_N) is a Hugging Face model.
"""


def init_distributed(device: str) -> None:
    """Join the torchrun process group when launched with WORLD_SIZE > 1 (gloo on CPU, nccl on GPU)."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")


def train_sft(overrides: Sequence[str], config_path: str | None = None) -> tuple[SupervisedTrainer, list[dict[str, float]]]:
    """Run an SFT job in this process (no CLI): load, build, fit.

    Args:
        overrides: dotted overrides on the schema defaults (or on ``config_path``).
        config_path: optional YAML file.

    Returns:
        (trainer, per-step metrics); the final model is ``<default_local_dir>/global_step_<N>``.
    """
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.sft_builders import build_supervised_trainer

    trainer = build_supervised_trainer(load_sft_config(config_path, overrides, algorithm="sft"))
    return trainer, trainer.fit()


def run(config_path: str | None, overrides: Sequence[str], algorithm: str = "sft") -> list[dict[str, float]]:
    """Load the config, build and fit; returns the per-step metrics."""
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.sft_builders import build_supervised_trainer

    cfg = load_sft_config(config_path, overrides, algorithm=algorithm)
    init_distributed(cfg.trainer.device)
    declared = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    if declared not in (1, dp_world_size()):
        # as in verl's SFT trainer the process group (torchrun) decides the world size
        logger.warning("trainer.nnodes x n_gpus_per_node = %d but torchrun started %d ranks; using %d",
                       declared, dp_world_size(), dp_world_size())
    trainer = build_supervised_trainer(cfg)
    history = trainer.fit()
    if dp_rank() == 0 and history:
        print(f"final checkpoint: {Path(cfg.trainer.default_local_dir) / f'global_step_{trainer.global_step}'}", flush=True)
    return history


def main(argv: Sequence[str] | None = None, algorithm: str = "sft") -> int:
    """``verl sft`` (``algorithm="sft"``) / ``verl dpo`` (``"dpo"``); returns the exit status."""
    from verl.config import ConfigError
    from verl.config.cli import split_config_arg

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    config_path, overrides = split_config_arg(argv, None)
    try:
        run(config_path, overrides, algorithm)
    except ConfigError as e:
        print(f"verl {algorithm}: config error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, ImportError, OSError) as e:
        if os.environ.get("VERL_TRACEBACK"):
            raise
        print(f"verl {algorithm}: error: {type(e).__name__}: {e}\n(set VERL_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


def dpo_main(argv: Sequence[str] | None = None) -> int:
    """``verl dpo [CONFIG] [overrides]``."""
    return main(argv, algorithm="dpo")


if __name__ == "__main__":
    sys.exit(main())
