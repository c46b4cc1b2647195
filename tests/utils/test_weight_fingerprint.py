"""`gather_samples` on FSDP2-style row shards (2 gloo processes) equals sampling the whole tensor."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from dist_helpers import spawn_ranks

from verl.utils.weight_fingerprint import (
    fingerprint,
    fingerprint_samples,
    gather_samples,
)


def _worker(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)  # the same full tensors on both ranks
        full = {
            "uneven": torch.randn(7, 300),
            "bias": torch.randn(5),
            "big": torch.randn(257, 33),
            "tiny": torch.randn(1, 3),
        }
        items = [(n, distribute_tensor(t, mesh, [Shard(0)])) for n, t in full.items()]
        items.append(("replicated", distribute_tensor(torch.randn(4, 4), mesh, [Replicate()])))
        items.append(("plain", torch.randn(3, 3)))
        got = {name: fingerprint_samples(p, d, s).digest for name, p, d, s in gather_samples(items)}
        want = {name: fingerprint(t.full_tensor() if hasattr(t, "full_tensor") else t).digest for name, t in items}
        out[rank] = got == want and len(got) == 6
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two processes
def test_shard_samples_equal_whole_tensor_samples():
    with mp.Manager() as manager:
        out = manager.dict()
        spawn_ranks(_worker, 2, out)
        assert dict(out) == {0: True, 1: True}
