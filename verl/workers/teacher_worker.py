"""`TeacherWorker`: a frozen teacher model that scores the student's rollouts (on-policy distillation).

The teacher is built like the reference policy (a frozen causal LM in an engine without
optimizer, sharded with FSDP2 over its ranks), from its own model path
(``distillation.teacher_models.NAME.model_path``). It reads the student's token ids, so it must
share the student's vocabulary. Its log-probs are at temperature 1 (scoring, not sampling),
as verl's teacher servers return ``prompt_logprobs``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from verl.engine import MicroBatchSpec, build_engine
from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.workers.actor import compute_log_prob

if TYPE_CHECKING:
    from verl.config.schema import FSDPConfig, ModelConfig
    from verl.config.schema_distill import TeacherModelConfig

__all__ = ["TeacherWorker", "teacher_micro_batches", "teacher_topk"]


def teacher_micro_batches(ref: Any, max_num_seqs: int | None) -> MicroBatchSpec:
    """The teacher's forwards are micro-batched as the reference policy's (``actor_rollout_ref.ref``:
    ``log_prob_micro_batch_size_per_gpu``, ``log_prob_use_dynamic_bsz``, ``log_prob_max_token_len_per_gpu``),
    with at most ``max_num_seqs`` rows (the teacher's ``inference.max_num_seqs``) per forward."""
    sizes = [s for s in (ref.log_prob_micro_batch_size_per_gpu, max_num_seqs) if s]
    return MicroBatchSpec(
        min(sizes) if sizes else None, ref.log_prob_use_dynamic_bsz, ref.log_prob_max_token_len_per_gpu
    )


def teacher_topk(module: torch.nn.Module, micro: DataProto, k: int) -> dict[str, torch.Tensor]:
    """The teacher's K largest log-probs per response position and their ids.

    Args:
        module: the teacher causal LM.
        micro: ``input_ids``, ``attention_mask``, ``position_ids`` `(B, T)`, ``responses`` `(B, R)`.
        k: K (at most the vocabulary size).

    Returns:
        ``teacher_logprobs`` `(B, R, K)` float32 (log-softmax at temperature 1, descending) and
        ``teacher_ids`` `(B, R, K)` int64.
    """
    from verl.modules.forward import response_logits

    b = micro.batch
    device = next(module.parameters()).device
    ids, mask, pos = (b[key].to(device) for key in ("input_ids", "attention_mask", "position_ids"))
    logits = response_logits(module, ids, mask, pos, b["responses"].shape[-1]).float()
    top = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
    return {"teacher_logprobs": top.values, "teacher_ids": top.indices}


class TeacherWorker(Worker):
    """One teacher of on-policy distillation, on its own pool or colocated with the actor.

    Args:
        model: the student's ``actor_rollout_ref.model`` section (trust_remote_code, external_lib
            and dtype are shared; path, LoRA and override_config are the teacher's own: none).
        teacher: the resolved teacher (`verl.config.schema_distill.resolve_teachers`).
        fsdp_config: sharding of the teacher (``actor_rollout_ref.ref.fsdp_config``: it is built
            like the reference policy).
        topk: K of a top-k distillation loss, or None for the sampled token's log-prob only.
        micro: the micro-batches of its forwards (`teacher_micro_batches`); None = ``max_num_seqs`` rows.
        device: ``cpu`` or ``cuda``.
    """

    def __init__(
        self,
        model: ModelConfig,
        teacher: TeacherModelConfig,
        fsdp_config: FSDPConfig,
        topk: int | None = None,
        micro: MicroBatchSpec | None = None,
        device: str = "cpu",
    ) -> None:
        super().__init__(device)
        self.model_cfg, self.teacher, self.fsdp_config, self.topk = model, teacher, fsdp_config, topk
        self.micro = micro or MicroBatchSpec(teacher.inference.max_num_seqs)
        self.engine = None

    @register(Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        """Load the frozen teacher; returns its vocabulary size (rows of its output embedding)."""
        from verl.modules import create_model

        dtype = {"fp32": "float32", "bf16": "bfloat16"}.get(self.teacher.inference.dtype, self.teacher.inference.dtype)
        cfg = dataclasses.replace(
            self.model_cfg,
            path=self.teacher.model_path,
            lora_rank=0,
            override_config={},
            enable_gradient_checkpointing=False,
        )
        module = create_model("ref", cfg, dtype=dtype, device=self.device).requires_grad_(False)
        vocab = int(module.get_output_embeddings().weight.shape[0])
        self.engine = build_engine(module, self.fsdp_config, self.world_size, device=self.device)
        return vocab

    @register(Dispatch.DP_COMPUTE_PROTO)
    def compute_teacher_log_prob(self, data: DataProto) -> DataProto:
        """Teacher scores of ``data``'s responses.

        Returns:
            ``teacher_logprobs`` `(B, R)` (log π_t of each sampled token) without top-k; with it,
            ``teacher_logprobs`` `(B, R, K)` and ``teacher_ids`` `(B, R, K)`.
        """
        micro = self.micro
        if self.topk is None:
            log_probs, _ = compute_log_prob(self.engine, data, 1.0, micro)
            return DataProto.from_dict(tensors={"teacher_logprobs": log_probs})
        out = self.engine.infer_batch(data, lambda module, m: teacher_topk(module, m, self.topk), micro)
        return DataProto.from_dict(tensors=out)
