"""The supervised training loop `SupervisedTrainer` (``verl sft`` / ``verl dpo`` / hybrid).

See `verl.trainer.sft_trainer` for what ``fit()`` does and the entry points; builders in
`verl.trainer.supervised.builders` assemble it (constructors store, builders build).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any


from verl.config.sft_schema import SFTRootConfig
from verl.engine.dist import barrier, data_parallel_rank, data_parallel_size, dp_rank, dp_world_size, sum_floats
from verl.modules.sp_packing import split_forward_count
from verl.protocol import DataProto
from verl.run.checkpoint import CheckpointManager, step_of

__all__ = ["SupervisedTrainer"]

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

    def __init__(
        self,
        config: SFTRootConfig,
        engine: Any,
        streams: list[Any],
        weights: list[float],
        tokenizer: Any,
        total_steps: int,
        validator: Any = None,
        export_hf: Any = None,
        sp_layout: Any = None,
    ) -> None:
        self.config, self.engine, self.streams, self.weights = config, engine, streams, weights
        self.tokenizer, self.total_steps, self.validator, self.export_hf = tokenizer, total_steps, validator, export_hf
        self.rank, self.world_size = dp_rank(), dp_world_size()
        # Ulysses SP (verl.workers.sharding.ulysses): the ranks of an SP group share a data shard
        self.sp_layout = sp_layout
        self.data_rank, self.data_world = data_parallel_rank(), data_parallel_size()
        t = config.trainer
        self.ckpt = CheckpointManager(t.default_local_dir, t.max_ckpt_to_keep)
        self.tracker: Any = None
        self.global_step = 0

    # --------------------------------------------------------------------------------- loop
    def fit(self) -> list[dict[str, float]]:
        """Train from the latest checkpoint (or from scratch) to ``total_steps``; returns the metrics per step."""
        t = self.config.trainer
        self._open_tracker()
        if self.rank == 0:
            self.ckpt.remove_temporaries()  # unfinished saves of an interrupted run (crash, full disk)
        barrier()
        self.global_step = self._restore()
        history: list[dict[str, float]] = []
        while self.global_step < self.total_steps:
            self.global_step += 1
            with self._sp_scope():
                split_before = split_forward_count()
                metrics = self.train_step(self.global_step)
                if self.sp_layout is not None:  # forwards of this step split along the sequence
                    metrics["perf/sp_split_forwards"] = float(split_forward_count() - split_before)
            last = self.global_step == self.total_steps
            if self.validator is not None and (last or (t.test_freq > 0 and self.global_step % t.test_freq == 0)):
                with self._sp_scope():
                    metrics.update(self.validator())
            # the metrics row is durable before its checkpoint is published (as in the RL loop): a
            # kill in between redoes the step on resume instead of losing its row
            history.append({"step": self.global_step, **metrics})
            if self.tracker is not None:
                self.tracker.log(metrics, self.global_step)
            if last or (t.save_freq > 0 and self.global_step % t.save_freq == 0):
                self.save_checkpoint()
        if self.tracker is not None:
            self.tracker.close()
        return history

    def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step over every stream (see the module docstring); returns its metrics."""
        start = time.perf_counter()
        prepared, metrics = [], {}
        for stream in self.streams:
            batch, extra = stream.prepare(stream.batch(step, self.data_rank, self.data_world), step)
            prepared.append(batch)
            if extra:  # per-rank means (equal row counts per rank) -> global means
                extra = {k: v / self.data_world for k, v in sum_floats(extra).items()}
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
            metrics["train/loss"] = sum(
                w * metrics[f"hybrid/{s.name}/loss"] for s, w in zip(self.streams, self.weights)
            )
        metrics["timing_s/step"] = time.perf_counter() - start
        return metrics

    def _sp_scope(self) -> Any:
        """The SP layout's scope (sequences split, reductions over data-parallel ranks), or nothing."""
        return self.sp_layout.scope() if self.sp_layout is not None else nullcontext()

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
        """``train/<k>`` for one stream (``rewards/*``, ``logps/*`` unprefixed, as TRL), ``hybrid/<task>/<k>`` for
        several."""
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
            (tmp_dir / "trainer_state.json").write_text(
                json.dumps({"global_step": step, "total_steps": self.total_steps})
            )

        if self.rank == 0:
            final = self.ckpt.save(step, write)
        else:
            barrier()
            self._write_state(tmp)
            final = self.ckpt.root / f"global_step_{step}"
        barrier()
        return final

    def _write_state(self, tmp_dir: Path) -> None:
        """The parts of ``checkpoint.save_contents``: model (and optimizer / extra) in ``actor/``, hf_model at the
        top."""
        from verl.engine.state_io import save_engine_state

        parts = self.config.checkpoint.save_contents
        e = self.engine
        save_engine_state(
            e.module,
            e.optimizer if "optimizer" in parts else None,
            e.scheduler if "extra" in parts else None,
            str(tmp_dir / "actor"),
        )
        if self.export_hf is not None and "hf_model" in parts:
            self.export_hf(tmp_dir)

    def _restore(self) -> int:
        t = self.config.trainer
        path = self.ckpt.find_resume(t.resume_mode, t.resume_from_path)
        if path is None:
            if self.tracker is not None:
                self.tracker.start_fresh()
            return 0
        self._load_state(path / "actor")
        step = step_of(path)
        if self.tracker is not None:
            self.tracker.keep_until(step)
        if self.rank == 0:
            print(f"resumed from {path} (step {step})", flush=True)
        return step

    def _load_state(self, actor_dir: Path) -> None:
        """Restore the parts of ``checkpoint.load_contents`` (a part the checkpoint lacks starts fresh)."""
        from verl.engine.state_io import load_engine_state

        parts, e = self.config.checkpoint.load_contents, self.engine
        with e.on_device():
            load_engine_state(
                e.module,
                e.optimizer if "optimizer" in parts else None,
                e.scheduler if "extra" in parts else None,
                str(actor_dir),
            )

    def _open_tracker(self) -> None:
        from verl.config.sft_loader import sft_config_to_yaml
        from verl.run.tracking import Tracking

        t = self.config.trainer
        if self.rank != 0:
            return
        out = Path(t.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(sft_config_to_yaml(self.config))
        self.tracker = Tracking(t.logger, out, t.project_name, t.experiment_name)


# -------------------------------------------------------------------------------------- CLI
