"""A sync from an FSDP2 x Ulysses SP actor (2 gloo ranks, sp=2, dp=1) into the hf rollout at
``tensor_model_parallel_size=2`` (hybrid engine, the rollout's own TP layout), through
`ActorRolloutRefWorker` as the trainer drives it: after one actor update the next generation syncs
the weights, and the engine's log-probs of its tokens equal the actor's log-probs computed through
the SP path (``compute_log_prob``) within 1e-5; the sync's peak extra memory
(``perf/update_weights_peak_extra_mb``, ``sync_stats["peak_extra_bytes"]``) is one whole tensor at
most, far below the model."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from dist_helpers import spawn_ranks

from verl.protocol import DataProto

PROMPTS = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32], [41, 42, 43, 44]]
R = 6


def _prompts() -> DataProto:
    from verl.modules.forward import position_ids_from_attention_mask

    width = max(len(r) for r in PROMPTS)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in PROMPTS])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in PROMPTS])
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(len(PROMPTS))], dtype=object)},
        meta_info={"do_sample": False},
    )


def _gap(gen: DataProto, lp: DataProto) -> float:
    mask = gen.batch["response_mask"].bool()
    return float((gen.batch["rollout_log_probs"] - lp.batch["old_log_probs"])[mask].abs().max())


def _train_batch(gen: DataProto, lp: DataProto, rank: int) -> DataProto:
    g = torch.Generator().manual_seed(rank)
    batch = gen.union(lp)
    batch.batch["advantages"] = torch.randn(batch.batch["responses"].shape, generator=g)
    return batch


def _rank_main(rank: int, port: int, config: object, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    worker = ActorRolloutRefWorker(config, use_reference=False, seed=1, device="cpu")
    try:
        worker.init_model(total_training_steps=2)
        mine = _prompts().chunk(2)[rank]  # the controller's chunk of this rank
        gen = worker.generate_sequences(mine)
        lp = worker.compute_log_prob(gen)
        out = {"gap_before": _gap(gen, lp), "sp": float(worker.sp.sp), "rollout_tp": float(worker.rollout_tp.tp)}
        worker.update_actor(_train_batch(gen, lp, rank))
        out["moved"] = _gap(gen, worker.compute_log_prob(gen))  # the old tokens under the updated actor
        synced = worker.generate_sequences(mine)  # stale: the in-place sync runs first
        synced_lp = worker.compute_log_prob(synced)
        out["gap_after"] = _gap(synced, synced_lp)
        metrics = worker.update_actor(_train_batch(synced, synced_lp, rank)).meta_info["metrics"]
        out["peak_mb"] = metrics["perf/update_weights_peak_extra_mb"]
        out["peak_bytes"] = worker.rollout.sync_stats["peak_extra_bytes"]
        out["sync_s"] = metrics["timing_s/update_weights"]
        sizes = [p.numel() * p.element_size() for p in worker.rollout.engine.module.parameters()]  # global shapes
        out["largest"], out["model"] = float(max(sizes)), float(sum(sizes))
        torch.save(out, os.path.join(out_dir, f"out{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(600)
def test_sync_from_sp2_actor_into_tp2_rollout_gives_the_sp_log_probs(tiny_model_dir, tmp_path):
    from verl.config import load_config

    cfg = load_config(
        None,
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "trainer.n_gpus_per_node=2",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "data.max_prompt_length=8",
            f"data.max_response_length={R}",
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "actor_rollout_ref.hybrid_engine=true",
            "actor_rollout_ref.actor.optim.lr=1e-2",
        ],
    )
    spawn_ranks(_rank_main, 2, cfg.actor_rollout_ref, str(tmp_path))
    for rank in (0, 1):
        out = torch.load(tmp_path / f"out{rank}.pt")
        print(rank, out)
        assert out["sp"] == 2.0 and out["rollout_tp"] == 2.0
        assert out["gap_before"] <= 1e-5 and out["gap_after"] <= 1e-5
        assert out["moved"] > 1e-3  # the update changed the actor: without the sync the engine would be this far off
        assert out["sync_s"] > 0 and out["peak_mb"] == pytest.approx(out["peak_bytes"] / 2**20)
        # the FSDP2 shards are gathered one tensor at a time: the peak is the largest whole tensor
        assert 0 < out["peak_bytes"] <= out["largest"] < out["model"] / 4
