"""The actor's distillation term (verl's distillation_ppo_loss), the teacher worker and the row routing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.algorithms import agg_loss
from verl.algorithms.kl import kl_penalty
from verl.config.schema import ActorConfig, FSDPConfig, ModelConfig, OptimConfig
from verl.config.schema_distill import TeacherModelConfig
from verl.engine import GlobalCounts, MicroBatchSpec, build_engine
from verl.modules.forward import response_logits
from verl.protocol import DataProto
from verl.trainer.ppo.distillation import TeacherScorer
from verl.workers.actor import compute_log_prob, forward_response_logprobs, policy_loss_fn
from verl.workers.distill_loss import DistillationLossParams
from verl.workers.teacher_worker import TeacherWorker

B, P, R = 4, 3, 4


def _batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    resp_mask = (torch.arange(R) < torch.tensor([[4], [1], [3], [2]])).long()
    mask = torch.cat([torch.ones(B, P, dtype=torch.long), resp_mask], -1)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": ids[:, P:],
            "response_mask": resp_mask,
            "advantages": torch.tensor([[1.0] * R, [-2.0] * R, [0.5] * R, [-1.0] * R]),
        }
    )


def _engine(model_dir):
    module = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2), total_steps=1)


def _run(engine, data: DataProto, params: DistillationLossParams | None) -> tuple[torch.Tensor, dict]:
    counts = GlobalCounts(tokens=float(data.batch["response_mask"].sum()), sequences=float(B))
    engine.module.zero_grad()
    loss, metrics = policy_loss_fn(ActorConfig(ppo_mini_batch_size=B), 1.0, distill=params)(engine.module, data, counts)
    loss.backward()
    return loss.detach(), metrics


def _grads(module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])


def test_k1_policy_gradient_matches_hand_formula(tiny_model_dir) -> None:
    engine, data = _engine(tiny_model_dir), _batch()
    lp, _ = compute_log_prob(engine, data, 1.0, MicroBatchSpec(B))
    mask = data.batch["response_mask"].float()
    delta = torch.linspace(-0.6, 0.9, B * R).view(B, R)  # k1 = log pi_s - log pi_t
    data.batch["teacher_logprobs"] = lp - delta
    k1 = DistillationLossParams("k1", use_task_rewards=False, use_policy_gradient=True)
    loss, metrics = _run(engine, data, k1)
    # on-policy: ratio 1, advantage -k1, so the token-mean loss is mean(k1) and its gradient that of
    # mean(k1.detach() * lp)
    assert float(loss) == pytest.approx(float((delta * mask).sum() / mask.sum()), abs=1e-5)
    assert metrics["distillation/abs_loss"] == pytest.approx(float((delta.abs() * mask).sum() / mask.sum()), abs=1e-5)
    ours = _grads(engine.module)
    engine.module.zero_grad()
    lp_grad, _ = forward_response_logprobs(engine.module, data, 1.0, False)
    manual = agg_loss(delta * lp_grad, mask, "token-mean")
    manual.backward()
    torch.testing.assert_close(ours, _grads(engine.module), rtol=1e-4, atol=1e-6)
    # with the task rewards: PPO loss + coef x distillation (coef 0.5); the PPO term alone is -token-mean(A)
    task, _ = _run(engine, data, None)
    both, _ = _run(engine, data, replace(k1, use_task_rewards=True, distillation_loss_coef=0.5))
    assert float(both) == pytest.approx(float(task) + 0.5 * float(loss), abs=1e-5)
    # clamp: k1 in [-0.3, 0.3]
    clamped, _ = _run(engine, data, replace(k1, loss_max_clamp=0.3))
    assert float(clamped) == pytest.approx(float((delta.clamp(-0.3, 0.3) * mask).sum() / mask.sum()), abs=1e-5)


def test_direct_k3_is_the_token_mean_of_k3(tiny_model_dir) -> None:
    engine, data = _engine(tiny_model_dir), _batch()
    lp, _ = compute_log_prob(engine, data, 1.0, MicroBatchSpec(B))
    data.batch["teacher_logprobs"] = lp - torch.linspace(-1.0, 1.0, B * R).view(B, R)
    loss, _ = _run(engine, data, DistillationLossParams("k3", use_task_rewards=False))
    mask = data.batch["response_mask"]
    assert float(loss) == pytest.approx(
        float(agg_loss(kl_penalty(lp, data.batch["teacher_logprobs"], "k3"), mask, "token-mean")), abs=1e-5
    )


def test_teacher_worker_scores_like_the_reference_forward(tiny_model_dir) -> None:
    data = _batch()
    teacher = TeacherModelConfig(key="default", model_path=str(tiny_model_dir))
    worker = TeacherWorker(ModelConfig(path=str(tiny_model_dir)), teacher, FSDPConfig())
    vocab = worker.init_model()
    assert vocab == AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).config.vocab_size
    got = worker.compute_teacher_log_prob(data).batch["teacher_logprobs"]
    want, _ = compute_log_prob(_engine(tiny_model_dir), data, 1.0, MicroBatchSpec(B))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    worker.topk = 5
    out = worker.compute_teacher_log_prob(data).batch
    module = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    with torch.no_grad():
        logits = response_logits(
            module, data.batch["input_ids"], data.batch["attention_mask"], data.batch["position_ids"], R
        )
    top = torch.log_softmax(logits.float(), -1).topk(5, dim=-1)
    torch.testing.assert_close(out["teacher_logprobs"], top.values, rtol=1e-5, atol=1e-5)
    assert torch.equal(out["teacher_ids"], top.indices)
    # the actor's top-k term reads them: forward KL over the top 5 against the full student softmax
    data.batch["teacher_logprobs"], data.batch["teacher_ids"] = out["teacher_logprobs"], out["teacher_ids"]
    engine = _engine(tiny_model_dir)
    loss, metrics = _run(engine, data, DistillationLossParams("forward_kl_topk", use_task_rewards=False))
    assert abs(float(loss)) < 1e-5  # student == teacher: the divergence is 0 (clamped truncated sums)
    assert 0 < metrics["distillation/teacher_mass"] <= 1.0


class _FakeTeacher:
    def __init__(self, value: float) -> None:
        self.value, self.rows = value, []

    def compute_teacher_log_prob(self, data: DataProto) -> DataProto:
        self.rows.append(data.non_tensor_batch["data_source"].tolist())
        return DataProto.from_dict(tensors={"teacher_logprobs": torch.full(data.batch["responses"].shape, self.value)})


def test_several_teachers_get_their_own_rows() -> None:
    data = _batch()
    data.non_tensor_batch["data_source"] = np.array(["math", "code", "math", "code"], dtype=object)
    groups = {"math": _FakeTeacher(-1.0), "code": _FakeTeacher(-2.0)}
    scorer = TeacherScorer(groups, "data_source", DistillationLossParams("k3"))
    scorer.score(data)
    assert data.batch["teacher_logprobs"][:, 0].tolist() == [-1.0, -2.0, -1.0, -2.0]
    assert groups["math"].rows == [["math", "math"]] and groups["code"].rows == [["code", "code"]]
    assert data.meta_info["distillation"].loss_mode == "k3"
    data.non_tensor_batch["data_source"] = np.array(["math", "poetry", "math", "code"], dtype=object)
    with pytest.raises(ValueError, match="no teacher for data_source='poetry'"):
        scorer.score(data)


def test_teacher_forwards_are_micro_batched_as_the_reference() -> None:
    from verl.config.schema import RefConfig
    from verl.workers.teacher_worker import teacher_micro_batches

    assert teacher_micro_batches(RefConfig(), 1024) == MicroBatchSpec(1024, False, 16384)
    ref = RefConfig(
        log_prob_micro_batch_size_per_gpu=8, log_prob_use_dynamic_bsz=True, log_prob_max_token_len_per_gpu=512
    )
    assert teacher_micro_batches(ref, 1024) == MicroBatchSpec(8, True, 512)
    assert teacher_micro_batches(ref, 4).size == 4 and teacher_micro_batches(RefConfig(), None).size is None
