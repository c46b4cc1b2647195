"""On-policy distillation in the RL loop: the teacher groups and the stage that scores each batch.

``distillation.enabled`` builds one `verl.workers.teacher_worker.TeacherWorker` group per
teacher (`build_teacher`). Every training step, after the student's rollouts are scored by the
reward, `TeacherScorer.score` adds the teacher's log-probs of the sampled tokens (or its top-k)
to the batch and the loss settings to ``meta_info["distillation"]``; the actor's loss then adds
the distillation term (`verl.workers.distill_loss`). Validation never calls the teacher (as verl).

Placement (`verl.config.schema_distill`): a teacher pool of 0 devices puts each teacher on the
actor's pool (colocated; on the local backend, in the driver process beside the actor); a
positive pool gives every teacher its own Ray pool of ``num_replicas * per_replica_world_size``
devices. The local backend runs one process per group, so there a teacher has at most 1.
Several teachers split the batch by the per-sample ``distillation.teacher_key`` value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.workers.distill_loss import DistillationLossParams

if TYPE_CHECKING:
    from verl.config.schema import RootConfig

__all__ = ["TeacherScorer", "build_teacher"]


@dataclass
class TeacherScorer:
    """The teacher groups of a run and how rows are routed to them.

    Attributes:
        groups: routing key -> the teacher's worker group (one entry: key ``default``, every row).
        teacher_key: the non-tensor batch field whose value is a row's routing key.
        params: the actor's loss settings, put in ``meta_info["distillation"]``.
        topk: K of a top-k loss, else None.
        pools: the teachers' own Ray pools (released by `shutdown`; colocated teachers have none).
    """

    groups: dict[str, Any]
    teacher_key: str
    params: DistillationLossParams
    topk: int | None = None
    pools: list[Any] = field(default_factory=list)

    def score(self, batch: DataProto) -> dict[str, float]:
        """Put the teacher's scores into ``batch`` (in place); returns ``distillation/*`` data metrics.

        Adds ``teacher_logprobs`` `(B, R)` (or ``teacher_logprobs`` / ``teacher_ids`` `(B, R, K)`).

        Raises:
            ValueError: several teachers and a row whose routing value names none of them.
        """
        rows = self._routes(batch)
        parts = {
            key: self.groups[key].compute_teacher_log_prob(batch[torch.as_tensor(idx)]) for key, idx in rows.items()
        }
        first = next(iter(parts.values()))
        for name in first.batch.keys():
            ref = first.batch[name]
            out = ref.new_zeros((len(batch), *ref.shape[1:]))
            for key, idx in rows.items():
                out[torch.as_tensor(idx)] = parts[key].batch[name]
            batch.batch[name] = out
        batch.meta_info["distillation"] = self.params
        return self._metrics(batch)

    def _routes(self, batch: DataProto) -> dict[str, np.ndarray]:
        if len(self.groups) == 1:
            return {next(iter(self.groups)): np.arange(len(batch))}
        values = batch.non_tensor_batch.get(self.teacher_key)
        if values is None:
            raise ValueError(
                f"distillation.teacher_key={self.teacher_key!r}: the batch has no such per-sample field "
                f"(it has {sorted(batch.non_tensor_batch)})"
            )
        unknown = sorted({str(v) for v in values} - set(self.groups))
        if unknown:
            raise ValueError(
                f"distillation: no teacher for {self.teacher_key}={unknown[0]!r}; teachers: {sorted(self.groups)}"
            )
        keys = np.asarray([str(v) for v in values], dtype=object)
        return {k: np.nonzero(keys == k)[0] for k in self.groups if (keys == k).any()}

    def _metrics(self, batch: DataProto) -> dict[str, float]:
        """``distillation/teacher_log_prob_mean`` over response tokens; k1 vs the rollout with top-1."""
        mask = batch.batch["response_mask"].bool()
        teacher = batch.batch["teacher_logprobs"]
        sampled = teacher if teacher.dim() == 2 else teacher[..., 0]  # top-k: the teacher's best token
        out = {"distillation/teacher_log_prob_mean": float(sampled[mask].mean()) if mask.any() else 0.0}
        if teacher.dim() == 2 and "rollout_log_probs" in batch.batch.keys() and mask.any():
            k1 = batch.batch["rollout_log_probs"] - teacher
            out["distillation/rollout_k1_mean"] = float(k1[mask].mean())
        return out

    def shutdown(self) -> None:
        """Shut the teacher groups down and release their own pools (idempotent)."""
        for wg in self.groups.values():
            wg.shutdown()
        for pool in self.pools:
            pool.release()
        self.pools = []


def build_teacher(cfg: RootConfig, actor_pool: Any, make_group: Callable[..., Any]) -> TeacherScorer | None:
    """The run's teachers (None unless ``distillation.enabled``), loaded and checked.

    Args:
        cfg: the finalized root config.
        actor_pool: the actor's resource pool (None on the local backend), shared by colocated teachers.
        make_group: ``verl.trainer.ppo.builders.build_worker_group`` (cfg, pool, role, worker class, *args).

    Raises:
        ConfigError: a teacher pool the backend cannot place (more than one device on the local
            backend), a teacher vocabulary different from the student's, or ``topk`` above it.
    """
    d = cfg.distillation
    if not d.enabled:
        return None
    from verl.config import ConfigError
    from verl.config.schema_distill import resolve_teachers
    from verl.workers.teacher_worker import TeacherWorker, teacher_micro_batches

    params = DistillationLossParams.from_config(d.distillation_loss)
    topk = d.distillation_loss.topk if params.uses_topk else None
    groups, pools, vocabs = {}, [], {}
    for key, teacher in resolve_teachers(d).items():
        pool = actor_pool
        if teacher.world_size > 0:
            if actor_pool is None and teacher.world_size > 1:
                raise ConfigError(
                    f"distillation: teacher {key!r} has {teacher.world_size} devices "
                    "(num_replicas x per_replica_world_size); the local backend runs one; use trainer.backend=ray"
                )
            if actor_pool is not None:  # the Ray backend
                import ray

                from verl.single_controller.ray import RayResourcePool

                free = ray.available_resources().get("GPU", 0.0)
                if (
                    cfg.trainer.device == "cuda" and free < teacher.world_size
                ):  # else the placement waits for GPUs that never come
                    raise ConfigError(
                        f"distillation: teacher {key!r} needs {teacher.world_size} GPU(s) of its own besides the "
                        f"actor's, but {free:g} are free; lower distillation.n_gpus_per_node / nnodes, or set "
                        "nnodes=0 to colocate the teacher with the actor"
                    )
                pool = RayResourcePool(teacher.world_size, cfg.trainer.device)
                pools.append(pool)
        micro = teacher_micro_batches(cfg.actor_rollout_ref.ref, teacher.inference.max_num_seqs)
        wg = make_group(
            cfg,
            pool,
            f"teacher_{key}",
            TeacherWorker,
            cfg.actor_rollout_ref.model,
            teacher,
            cfg.actor_rollout_ref.ref.fsdp_config,
            topk,
            micro,
            device=cfg.trainer.device,
        )
        vocabs[key] = wg.init_model()[0]
        groups[key] = wg
    _check_vocab(cfg, vocabs, topk)
    return TeacherScorer(groups, d.teacher_key, params, topk, pools)


def _check_vocab(cfg: RootConfig, vocabs: dict[str, int], topk: int | None) -> None:
    """The teachers score the student's token ids: same vocabulary size (and K within it)."""
    from transformers import AutoConfig

    from verl.config import ConfigError
    from verl.modules.factory import resolve_model_path

    m = cfg.actor_rollout_ref.model
    student = AutoConfig.from_pretrained(resolve_model_path(m.path), trust_remote_code=m.trust_remote_code)
    size = getattr(student, "vocab_size", None) or getattr(getattr(student, "text_config", None), "vocab_size", None)
    for key, vocab in vocabs.items():
        if size is not None and vocab != size:
            raise ConfigError(
                f"distillation: teacher {key!r} has a vocabulary of {vocab} tokens, the student "
                f"{size}; the teacher must use the student's tokenizer"
            )
        if topk is not None and topk > vocab:
            raise ConfigError(f"distillation.distillation_loss.topk={topk} exceeds the teacher's vocabulary ({vocab})")
