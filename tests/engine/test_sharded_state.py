"""FSDP2 engine on 2 gloo ranks: same step as one process, and its state files load at any world size.

Spawns two CPU processes (torch.multiprocessing, gloo), no Ray.
"""

from __future__ import annotations

import os

import pytest
import torch
from dist_helpers import spawn_ranks

from verl.config.schema import FSDPConfig, OptimConfig
from verl.engine import GlobalCounts, MicroBatchSpec, build_engine
from verl.protocol import DataProto


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


class Net(torch.nn.Module):
    _no_split_modules = ["Block"]  # FSDP2 shards each Block, then the root

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).squeeze(-1)


def _data() -> DataProto:
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(8, 3, generator=g) > 0.3).long()
    mask[:, 0] = 1
    return DataProto.from_dict(
        tensors={"x": torch.randn(8, 3, 4, generator=g), "y": torch.randn(8, 3, generator=g), "response_mask": mask}
    )


def loss_fn(module: torch.nn.Module, micro: DataProto, counts: GlobalCounts):
    b = micro.batch
    mask = b["response_mask"].float()
    loss = (((module(b["x"]) - b["y"]) ** 2) * mask).sum() / counts.tokens
    return loss, {"loss": loss.detach()}


def _engine(world_size: int):
    torch.manual_seed(0)
    return build_engine(Net(), FSDPConfig(), world_size, optim=OptimConfig(lr=0.1, weight_decay=0.0), total_steps=4)


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        engine = _engine(2)
        half = _data()[list(range(rank * 4, rank * 4 + 4))]
        engine.train_batch(half, loss_fn, MicroBatchSpec(size=2))
        engine.lr_scheduler_step()
        engine.save(out_dir)
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_two_sharded_ranks_save_what_one_process_computes(tmp_path):
    spawn_ranks(_rank_main, 2, str(tmp_path / "ckpt"))
    local = _engine(1)
    local.train_batch(_data(), loss_fn, MicroBatchSpec())  # the whole batch in one process
    local.lr_scheduler_step()
    loaded = _engine(1)
    torch.manual_seed(1)
    for p in loaded.module.parameters():  # make sure load really overwrites
        p.data.normal_()
    loaded.load(str(tmp_path / "ckpt"))
    for (name, a), b in zip(local.module.state_dict().items(), loaded.module.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6, msg=name)
    assert loaded.current_lr() == local.current_lr()
    exp_avg = {
        k: v["exp_avg"] for k, v in torch.load(tmp_path / "ckpt" / "optim.pt", weights_only=True)["state"].items()
    }
    assert set(exp_avg) == {n for n, _ in local.module.named_parameters()}  # keyed by parameter name
    # the restored AdamW moments continue identically
    for eng in (local, loaded):
        eng.train_batch(_data(), loss_fn, MicroBatchSpec())
    for a, b in zip(local.module.parameters(), loaded.module.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
