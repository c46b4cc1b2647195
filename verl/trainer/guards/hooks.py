"""`RunGuards`: the alarms and the divergence sentinel as four hooks of the RL loop.

`RLTrainer` calls, per step: `skip_batch` (first, with the data-loader batch), `before_update`
(with the actor's update batch, right before ``update_actor``) and `after_step` (with the
step's batch and metrics; returns the ``alarm/*`` and ``sentinel/*`` metrics and may raise);
`on_validation` after each validation; and it runs its loop through `fit_with_rollback`. The
alarm and sentinel state lives in ``TrainerState.extra`` too, so checkpoints carry it and a
resumed run reports what an uninterrupted one does. The module is self-contained: it reads the trainer's
parts, config and state and never changes the loop's stages.

On a sentinel trip `after_step` writes an incident bundle (`verl.trainer.guards.incident`), prints
one line, and then, per ``trainer.sentinel.action``: warn (continue), stop (`DivergenceError`), or
rollback (`RollbackRequested`, handled by `fit_with_rollback`: the last good checkpoint is
restored, the tripping batch is skipped when the data loader yields it again, the run goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.run.checkpoint import step_of
from verl.trainer.guards.alarms import RewardAlarms
from verl.trainer.guards.incident import REPLAY_KEYS, ReplayStep, write_bundle
from verl.trainer.guards.sentinel import DivergenceSentinel, batch_digest
from verl.run.checkpoint import capture_rng_state
from verl.utils.errors import UserError

STATE_KEY = "run_guards"  # key of the alarm and sentinel state in TrainerState.extra (saved with checkpoints)
MAX_ROLLBACKS = 3  # a batch that trips again after 3 rollbacks is not a one-off: stop instead


class DivergenceError(UserError, RuntimeError):
    """The sentinel tripped with ``trainer.sentinel.action=stop`` (or rollback ran out)."""

    kind = "divergence"


class RollbackRequested(Exception):
    """Raised by `RunGuards.after_step` to make `fit_with_rollback` restore ``checkpoint``."""

    def __init__(self, step: int, checkpoint: Path) -> None:
        super().__init__(f"roll back from step {step} to {checkpoint}")
        self.step, self.checkpoint = step, checkpoint


class RunGuards:
    """Alarm and sentinel state of one run.

    Args:
        config: the resolved `RootConfig` (reads ``trainer.alarms`` / ``trainer.sentinel``).
        echo: where one-line notices go (default ``print``).
    """

    def __init__(self, config: Any, echo: Callable[[str], None] | None = None) -> None:
        self.config = config
        t = config.trainer
        self.echo = echo or (lambda line: print(line, flush=True))
        self.alarms = RewardAlarms(t.alarms, self.echo) if t.alarms.enable else None
        self.sentinel = DivergenceSentinel(t.sentinel) if t.sentinel.enable else None
        self.window: list[ReplayStep] = []  # actor updates since the last checkpoint
        self.bundles: list[Path] = []
        self.skip_digests: set[str] = set()
        self.rollbacks = 0
        self._digest = ""
        self._resume_saved: tuple[str, str | None] | None = None  # the user's resume settings during a rollback
        self._synced: dict[str, Any] | None = None  # the state last loaded from / saved to trainer.state.extra

    # ------------------------------------------------------------------------------- hooks
    def skip_batch(self, batch_dict: dict[str, Any]) -> bool:
        """True for the batch that tripped before a rollback (the loop then takes the next one)."""
        self._restore_resume_settings()
        if self.sentinel is None:
            return False
        self._digest = batch_digest(batch_dict)
        if self._digest in self.skip_digests:
            self.skip_digests.discard(self._digest)
            self.echo("SENTINEL: skipping the batch that tripped before the rollback")
            return True
        return False

    def before_update(self, trainer: Any, actor_batch: Any) -> None:
        """Keep the update batch and the RNG states for an incident bundle.

        The batch is kept by reference in new containers (`DataProto.select`): keys the update adds
        or replaces do not reach it, and no tensor is copied (the cost is the memory of up to
        ``replay_window`` batches kept alive).
        """
        if self.sentinel is None:
            return
        step = trainer.global_step + 1
        last = self._last_checkpoint(trainer, step)[1]
        self.window = [s for s in self.window if last < s.step < step]
        self.window.append(ReplayStep(step, actor_batch.select(), capture_rng_state()))
        del self.window[: -self.config.trainer.sentinel.replay_window]

    def after_step(self, trainer: Any, batch: Any, metrics: dict[str, float]) -> dict[str, float]:
        """``alarm/*`` and ``sentinel/*`` metrics of the finished step; on a trip, the sentinel's action.

        Raises:
            DivergenceError: a trip with action=stop, or with rollback after `MAX_ROLLBACKS`
                rollbacks or without a checkpoint.
            RollbackRequested: a trip with action=rollback.
        """
        step = trainer.global_step + 1
        self._sync_state(trainer)
        out: dict[str, float] = {}
        if self.alarms is not None:
            out.update(self.alarms.update(step, batch, metrics))
        if self.sentinel is None:
            self._save_state(trainer)
            return out
        if self.window and self.window[-1].step == step:
            self.window[-1].recorded = {k: float(metrics[k]) for k in REPLAY_KEYS if k in metrics}
        adv = batch.batch["advantages"] if "advantages" in batch.batch.keys() else None
        reasons, sentinel_metrics = self.sentinel.check(step, metrics, adv)
        out.update(sentinel_metrics)
        self._save_state(trainer)
        if reasons:
            self._trip(trainer, step, reasons, {**metrics, **out})
        return out

    # ------------------------------------------------------------------------------- state
    def _sync_state(self, trainer: Any) -> None:
        """Load the state a checkpoint restore put into ``trainer.state.extra`` (once per restore)."""
        saved = trainer.state.extra.get(STATE_KEY)
        if saved is not None and saved is not self._synced:
            if self.alarms is not None:
                self.alarms.load_state_dict(saved.get("alarms", {}))
            if self.sentinel is not None:
                self.sentinel.load_state_dict(saved.get("sentinel", {}))
            self._synced = saved

    def _save_state(self, trainer: Any) -> None:
        """Put the alarm and sentinel state where the next checkpoint saves it."""
        saved = {
            "alarms": self.alarms.state_dict() if self.alarms is not None else {},
            "sentinel": self.sentinel.state_dict() if self.sentinel is not None else {},
        }
        trainer.state.extra[STATE_KEY] = self._synced = saved

    def on_validation(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Record a validation (after step ``trainer.global_step``) for the train/validation divergence alarm."""
        if self.alarms is not None:
            self._sync_state(trainer)
            self.alarms.note_validation(trainer.global_step, metrics)
            self._save_state(trainer)

    # ------------------------------------------------------------------------------- trips
    def _trip(self, trainer: Any, step: int, reasons: list[str], metrics: dict[str, float]) -> None:
        s = self.config.trainer.sentinel
        ckpt, ckpt_step = self._last_checkpoint(trainer, step)
        where = ""
        if len(self.bundles) < s.max_bundles:
            root = Path(s.incident_dir or Path(self.config.trainer.output_dir) / "incidents")
            steps = [w for w in self.window if w.step > ckpt_step]
            bundle = write_bundle(root, step, reasons, metrics, self.config, steps, ckpt, ckpt_step)
            self.bundles.append(bundle)
            where = f"; incident bundle {bundle} (verl replay {bundle})"
        self.echo(f"SENTINEL step {step} tripped: {'; '.join(reasons)}{where}")
        if s.action == "stop":
            raise DivergenceError(f"step {step}: {'; '.join(reasons)}{where} (trainer.sentinel.action=stop)")
        if s.action == "rollback":
            if ckpt is None:
                raise DivergenceError(
                    f"step {step}: {'; '.join(reasons)}; no checkpoint before it to roll back to{where}"
                )
            if self.rollbacks >= MAX_ROLLBACKS:
                raise DivergenceError(
                    f"step {step}: {'; '.join(reasons)}; still tripping after {MAX_ROLLBACKS} rollbacks{where}"
                )
            raise RollbackRequested(step, ckpt)

    @staticmethod
    def _last_checkpoint(trainer: Any, step: int) -> tuple[Path | None, int]:
        """The newest checkpoint before ``step`` and its step; (None, 0) = the initial weights."""
        mgr = trainer.parts.checkpoints
        dirs = [d for d in (mgr.step_dirs() if mgr is not None else []) if step_of(d) < step]
        if not dirs:
            return None, 0
        best = max(dirs, key=step_of)
        return best, step_of(best)

    def prepare_rollback(self, trainer: Any, request: RollbackRequested) -> None:
        """Point the next `_fit` at ``request.checkpoint`` and mark the tripping batch to skip."""
        t = trainer.config.trainer
        self.rollbacks += 1
        self.skip_digests.add(self._digest)
        back = step_of(request.checkpoint)
        if self.sentinel is not None:
            self.sentinel.forget_after(back)
        self.window = []
        trainer.parts.history[:] = [r for r in trainer.parts.history if int(r.get("step", 0)) <= back]
        if self._resume_saved is None:
            self._resume_saved = (t.resume_mode, t.resume_from_path)
        t.resume_mode, t.resume_from_path = "resume_path", str(request.checkpoint)
        self.echo(
            f"SENTINEL: rolling back to {request.checkpoint} (step {back}); "
            f"the batch of step {request.step} will be skipped"
        )

    def _restore_resume_settings(self) -> None:
        if self._resume_saved is not None:
            t = self.config.trainer
            t.resume_mode, t.resume_from_path = self._resume_saved
            self._resume_saved = None


def fit_with_rollback(trainer: Any, fit: Callable[[], list[dict[str, float]]]) -> list[dict[str, float]]:
    """Run ``fit`` (the trainer's loop); on `RollbackRequested`, restore and run it again.

    ``fit`` resumes from ``trainer.resume_from_path`` set by `RunGuards.prepare_rollback`; the
    user's resume settings come back at the first step after the restore.
    """
    while True:
        try:
            return fit()
        except RollbackRequested as request:
            trainer.guards.prepare_rollback(trainer, request)
