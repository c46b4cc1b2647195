"""CPU offload of `FSDPTrainingEngine` at world size 1 on a CUDA device (needs a GPU)."""

from __future__ import annotations

import pytest
import torch

from verl.config.schema import FSDPConfig, OptimConfig
from verl.engine import GlobalCounts, MicroBatchSpec, build_engine
from verl.protocol import DataProto

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def loss_fn(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts):
    x = micro.batch["x"].to("cuda")
    loss = (module(x).squeeze(-1) ** 2).sum() / counts.sequences
    return loss, {"loss": loss.detach()}


def _engine(offload: bool):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to("cuda")
    fsdp = FSDPConfig(param_offload=offload, optimizer_offload=offload)
    return build_engine(module, fsdp, 1, optim=OptimConfig(lr=0.1, weight_decay=0.0), device="cuda")


def test_offloaded_engine_keeps_state_on_cpu_between_calls_and_trains_identically():
    data = DataProto.from_dict(tensors={"x": torch.randn(6, 8), "response_mask": torch.ones(6, 1)})
    plain, offloaded = _engine(False), _engine(True)
    assert all(p.device.type == "cpu" for p in offloaded.module.parameters())
    for _ in range(3):
        a = plain.train_batch(data, loss_fn, MicroBatchSpec(2))
        b = offloaded.train_batch(data, loss_fn, MicroBatchSpec(2))
        assert a.metrics["loss"] == pytest.approx(b.metrics["loss"], rel=1e-5)
    assert all(p.device.type == "cpu" for p in offloaded.module.parameters())
    assert all(v.device.type == "cpu" for s in offloaded.optimizer.state.values() for k, v in s.items() if k != "step")
    for p, q in zip(plain.module.parameters(), offloaded.module.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-5)
    with offloaded.on_device():
        assert all(p.device.type == "cuda" for p in offloaded.module.parameters())
