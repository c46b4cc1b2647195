"""`FSDPTrainingEngine`: micro-batching never changes the gradient, non-finite steps are skipped,
state round-trips through save / load, inference keeps row order."""

from __future__ import annotations

import math

import pytest
import torch

from verl.config.schema import FSDPConfig, OptimConfig
from verl.engine import FSDPTrainingEngine, GlobalCounts, MicroBatchSpec, TrainingEngine, build_engine
from verl.protocol import DataProto

B, L, D = 6, 5, 3


class Scorer(torch.nn.Module):
    """Per-token score ``w · x + b``, enough to give every parameter a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).squeeze(-1)


def _batch(seed: int = 0) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, L, dtype=torch.long)
    for i, n in enumerate([5, 1, 3, 4, 2, 5]):
        mask[i, :n] = 1
    return DataProto.from_dict(
        tensors={
            "x": torch.randn(B, L, D, generator=g),
            "target": torch.randn(B, L, generator=g),
            "response_mask": mask,
            "attention_mask": mask,
        }
    )


def token_mean_loss(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts):
    b = micro.batch
    mask = b["response_mask"].float()
    sq = (module(b["x"]) - b["target"]) ** 2
    loss = (sq * mask).sum() / counts.tokens
    return loss, {"loss": loss.detach(), "tokens": mask.sum() / counts.tokens}


def _engine(seed: int = 0, lr: float = 0.1, grad_clip: float = 1e9) -> FSDPTrainingEngine:
    torch.manual_seed(seed)
    return build_engine(
        Scorer(),
        FSDPConfig(),
        1,
        optim=OptimConfig(lr=lr, weight_decay=0.0, lr_warmup_steps=2),
        total_steps=10,
        grad_clip=grad_clip,
    )


def _grads(engine: FSDPTrainingEngine, data: DataProto, micro: MicroBatchSpec) -> list[torch.Tensor]:
    from verl.engine.micro_batches import split_micro_batches

    counts = engine.global_counts(data, "response_mask")
    for m in split_micro_batches(data, micro.size, micro.dynamic, micro.max_token_len)[0]:
        engine.forward_backward(m, token_mean_loss, counts)
    grads = [p.grad.clone() for p in engine.module.parameters()]
    engine.optimizer.zero_grad(set_to_none=True)
    return grads


def test_engine_satisfies_the_protocol():
    assert isinstance(_engine(), TrainingEngine)


def test_micro_batched_gradient_equals_full_batch_and_hand_computed():
    data, engine = _batch(), _engine()
    full = _grads(engine, data, MicroBatchSpec())
    for micro in (MicroBatchSpec(1), MicroBatchSpec(4), MicroBatchSpec(dynamic=True, max_token_len=6)):
        for a, b in zip(_grads(engine, data, micro), full):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    # independent reference: autograd of the plain token mean over the whole batch
    ref = Scorer()
    ref.load_state_dict(engine.module.state_dict())
    mask = data.batch["response_mask"].bool()
    ((ref(data.batch["x"]) - data.batch["target"])[mask] ** 2).mean().backward()
    for a, p in zip(full, ref.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-6)


def test_train_batch_metrics_are_global_sums_and_steps_equal_across_micro_batching():
    data = _batch()
    a, b = _engine(), _engine()
    ra = a.train_batch(data, token_mean_loss, MicroBatchSpec())
    rb = b.train_batch(data, token_mean_loss, MicroBatchSpec(1))
    assert ra.stepped and rb.stepped
    assert ra.metrics["tokens"] == pytest.approx(1.0) and rb.metrics["tokens"] == pytest.approx(1.0)
    assert ra.metrics["loss"] == pytest.approx(rb.metrics["loss"], rel=1e-6)
    assert ra.grad_norm == pytest.approx(rb.grad_norm, rel=1e-6)
    for pa, pb in zip(a.module.parameters(), b.module.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-6)


def test_gradient_is_clipped_to_grad_clip():
    engine = _engine(lr=1.0, grad_clip=1e-3)
    engine.optimizer = torch.optim.SGD(engine.module.parameters(), lr=1.0)
    before = [p.detach().clone() for p in engine.module.parameters()]
    res = engine.train_batch(_batch(), token_mean_loss, MicroBatchSpec())
    with torch.no_grad():
        moved = torch.sqrt(sum(((p - q) ** 2).sum() for p, q in zip(engine.module.parameters(), before)))
    assert res.grad_norm > 1e-3 and float(moved) == pytest.approx(1e-3, rel=1e-3)


def test_non_finite_loss_skips_the_step_and_the_next_one_trains():
    engine = _engine()
    before = [p.detach().clone() for p in engine.module.parameters()]

    def bad(module, micro, counts):
        loss, metrics = token_mean_loss(module, micro, counts)
        return loss * math.inf, metrics

    res = engine.train_batch(_batch(), bad, MicroBatchSpec(2))
    assert not res.stepped and not math.isfinite(res.grad_norm)
    assert all(torch.equal(p, q) for p, q in zip(engine.module.parameters(), before))
    assert all(p.grad is None for p in engine.module.parameters())
    assert engine.train_batch(_batch(), token_mean_loss, MicroBatchSpec(2)).stepped
    assert not all(torch.equal(p, q) for p, q in zip(engine.module.parameters(), before))


def test_lr_schedule_reports_the_lr_used_then_advances():
    engine = _engine(lr=0.1)  # 2 warm-up updates
    assert [engine.lr_scheduler_step() for _ in range(3)] == pytest.approx([0.05, 0.1, 0.1])


def test_save_load_round_trip_continues_identically(tmp_path):
    data = _batch()
    a = _engine(seed=0)
    a.train_batch(data, token_mean_loss, MicroBatchSpec())
    a.lr_scheduler_step()
    a.save(str(tmp_path / "ckpt"))
    assert {p.name for p in (tmp_path / "ckpt").iterdir()} == {"model.safetensors", "optim.pt", "scheduler.json"}
    b = _engine(seed=123)
    assert not torch.equal(a.module.proj.weight, b.module.proj.weight)
    b.load(str(tmp_path / "ckpt"))
    assert torch.equal(a.module.proj.weight, b.module.proj.weight) and b.current_lr() == a.current_lr()
    for eng in (a, b):
        eng.train_batch(_batch(seed=1), token_mean_loss, MicroBatchSpec())
    for pa, pb in zip(a.module.parameters(), b.module.parameters()):
        torch.testing.assert_close(pa, pb, atol=0, rtol=0)  # AdamW moments restored too


def test_load_refuses_another_model(tmp_path):
    _engine().save(str(tmp_path / "ckpt"))
    torch.manual_seed(0)
    other = build_engine(torch.nn.Linear(D, 2), FSDPConfig(), 1, optim=OptimConfig())
    with pytest.raises(ValueError, match="does not match this model"):
        other.load(str(tmp_path / "ckpt"))


def test_infer_batch_returns_rows_in_input_order_with_dynamic_micro_batches():
    data, engine = _batch(), _engine()
    engine.module.train()
    fixed = engine.infer_batch(data, lambda m, mb: {"s": m(mb.batch["x"])}, MicroBatchSpec())["s"]
    dynamic = engine.infer_batch(
        data, lambda m, mb: {"s": m(mb.batch["x"])}, MicroBatchSpec(dynamic=True, max_token_len=6)
    )["s"]
    torch.testing.assert_close(dynamic, fixed)
    torch.testing.assert_close(fixed, engine.module(data.batch["x"]).detach())
    assert engine.module.training  # mode restored


def test_frozen_engine_has_no_optimizer_step():
    engine = build_engine(Scorer(), FSDPConfig(), 1)
    with pytest.raises(RuntimeError, match="without an optimizer"):
        engine.optimizer_step()
