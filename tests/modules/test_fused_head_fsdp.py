"""The fused LM head steps aside under FSDP2 sharding (2 gloo ranks): the sharded model's own forward
gives the log-probs of the unsharded fused path (issue 14)."""

from __future__ import annotations

import os

import pytest
import torch
from dist_helpers import spawn_ranks

from verl.config.schema import FSDPConfig, ModelConfig


def _batch() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :2] = 0
    return ids * mask, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _rank_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.engine.fsdp import shard_module
    from verl.modules import create_model
    from verl.modules.forward import compute_log_probs_and_entropy, fused_lm_head

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        module = shard_module(create_model("actor", ModelConfig(path=model_dir)), FSDPConfig(), 2)
        assert fused_lm_head(module) is None  # DTensor head: the model's own forward unshards it
        lp, _ = compute_log_probs_and_entropy(module, *_batch(), 4, compute_entropy=False, remove_padding=True)
        lp.sum().backward()
        torch.save(lp.detach(), os.path.join(out_dir, f"lp{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned FSDP2 processes; the fused-head equality tests run in process in the default suite
@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_sharded_model_takes_the_unfused_path_with_equal_log_probs(tiny_model_dir, tmp_path):
    from verl.modules import create_model
    from verl.modules.forward import compute_log_probs_and_entropy, fused_lm_head

    spawn_ranks(_rank_main, 2, str(tiny_model_dir), str(tmp_path))
    torch.manual_seed(0)
    module = create_model("actor", ModelConfig(path=str(tiny_model_dir)))
    assert fused_lm_head(module) is not None
    with torch.no_grad():
        ref, _ = compute_log_probs_and_entropy(module, *_batch(), 4, compute_entropy=False, remove_padding=True)
    for rank in (0, 1):
        torch.testing.assert_close(torch.load(tmp_path / f"lp{rank}.pt"), ref, atol=1e-5, rtol=0)
