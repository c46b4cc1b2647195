"""Dispatch/collect of worker-group calls, on the local backend and on a fake 3-rank group."""

from __future__ import annotations

import torch

from verl.protocol import DataProto
from verl.single_controller.base import BaseWorkerGroup, Dispatch, Worker, register
from verl.single_controller.local import LocalWorkerGroup


class EchoWorker(Worker):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    @register(Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        out = DataProto.from_dict(tensors={"y": data.batch["x"] * 2 * self.scale})
        out.meta_info["metrics"] = {"n": float(len(data))}
        return out

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self) -> int:
        return self.rank

    @register(Dispatch.RANK_ZERO)
    def first(self, value: int) -> int:
        return value + 1


class FakeGroup(BaseWorkerGroup):
    """N in-process workers with different ranks: exercises padding and metric merging."""

    def __init__(self, n: int) -> None:
        super().__init__(EchoWorker, world_size=n)
        self.workers = []
        for r in range(n):
            w = EchoWorker.__new__(EchoWorker)
            w.rank, w.world_size, w.scale = r, n, 1.0
            self.workers.append(w)
        self.calls: list[int] = []

    def _execute(self, name, per_args, per_kwargs, ranks):
        self.calls.append(len(ranks))
        return [getattr(self.workers[r], name)(*per_args[i], **per_kwargs[i]) for i, r in enumerate(ranks)]


def test_local_group_exposes_registered_methods():
    wg = LocalWorkerGroup(EchoWorker, scale=3.0)
    data = DataProto.from_dict(tensors={"x": torch.arange(4.0)})
    out = wg.double(data)
    assert torch.equal(out.batch["y"], torch.tensor([0.0, 6.0, 12.0, 18.0]))
    assert wg.whoami() == [0]
    assert wg.first(4) == 5


def test_dp_dispatch_pads_splits_and_unpads():
    wg = FakeGroup(3)
    data = DataProto.from_dict(tensors={"x": torch.arange(7.0)})
    out = wg.double(data)
    # 7 rows padded to 9 (3 per rank), padding removed after collect: order preserved
    assert torch.equal(out.batch["y"], torch.arange(7.0) * 2)
    assert out.meta_info["metrics"]["n"] == [3.0, 3.0, 3.0]
    assert wg.whoami() == [0, 1, 2]
    assert wg.first(1) == 2 and wg.calls[-1] == 1
