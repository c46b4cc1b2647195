"""The hf rollout at ``tensor_model_parallel_size=2`` (2 gloo ranks, fp32): a TP-split decode gives
the greedy tokens of the whole model, and a sync from an FSDP2-sharded actor into the rollout's TP
layout (one whole tensor at a time, each rank keeping its slice) gives engine log-probs equal to
the actor's own."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
from dist_helpers import spawn_ranks
from model_helpers import tiny_causal_lm

from verl.config.schema import RolloutConfig
from verl.modules.forward import position_ids_from_attention_mask
from verl.protocol import DataProto

VOCAB, R = 128, 6
PROMPTS = [[11, 12], [21, 22, 23, 24, 25], [31, 32, 33], [41, 42, 43, 44]]


def _tiny_lm(seed: int) -> torch.nn.Module:
    return tiny_causal_lm(seed=seed, vocab_size=VOCAB)


def _prompts() -> DataProto:
    width = max(len(r) for r in PROMPTS)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in PROMPTS])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in PROMPTS])
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_attention_mask(mask)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(len(PROMPTS))], dtype=object)},
        meta_info={"do_sample": False},
    )


def _engine(module: torch.nn.Module) -> object:
    from verl.workers.rollout import HFRollout

    return HFRollout(
        module, RolloutConfig(response_length=R, tensor_model_parallel_size=2), eos_token_id=[VOCAB - 1], pad_token_id=0
    )


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.config.schema import FSDPConfig
    from verl.engine import build_engine
    from verl.modules.forward import compute_log_probs
    from verl.workers.rollout_sync import sync_in_place
    from verl.workers.sharding.tensor_parallel import build_rollout_layout

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        prompts = _prompts()
        mine = prompts.chunk(2)[rank]  # the controller's chunk of this rank
        whole = _tiny_lm(seed=0)
        ref = _engine(whole).generate_sequences(prompts).chunk(2)[rank]
        layout = build_rollout_layout(RolloutConfig(tensor_model_parallel_size=2), 2)
        split = copy.deepcopy(whole)
        layout.prepare(split)
        tp = layout.run(mine, _engine(split).generate_sequences)
        out = {
            "tokens_equal": float(torch.equal(tp.batch["responses"], ref.batch["responses"])),
            "lp_tp": float((tp.batch["rollout_log_probs"] - ref.batch["rollout_log_probs"]).abs().max()),
            "sharded": float(hasattr(split.model.layers[0].self_attn.q_proj.weight, "device_mesh")),
        }
        # an FSDP2 actor (other weights) synced into the TP layout, one whole tensor at a time
        actor = build_engine(_tiny_lm(seed=1), FSDPConfig(), 2)
        stats: dict[str, float] = {}
        sync_in_place(actor.module, split, stats=stats)
        out["peak_extra"] = stats["peak_extra_bytes"]  # the largest whole tensor, never the whole model
        out["largest"] = float(max(p.numel() * p.element_size() for p in whole.parameters()))
        out["model"] = float(sum(p.numel() * p.element_size() for p in whole.parameters()))
        synced = layout.run(mine, _engine(split).generate_sequences)
        b = synced.batch
        with torch.no_grad():
            actor_lp = compute_log_probs(actor.module, b["input_ids"], b["attention_mask"], b["position_ids"], R)
        mask = b["response_mask"].bool()
        out["lp_sync"] = float((b["rollout_log_probs"] - actor_lp)[mask].abs().max())
        out["changed"] = float(not torch.equal(b["responses"], ref.batch["responses"]))
        torch.save(out, os.path.join(out_dir, f"out{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_tp2_greedy_tokens_equal_tp1_and_a_sync_from_fsdp_gives_the_actors_log_probs(tmp_path):
    spawn_ranks(_rank_main, 2, str(tmp_path))
    for rank in (0, 1):
        out = torch.load(tmp_path / f"out{rank}.pt")
        print(rank, out)
        assert out["sharded"] == 1.0 and out["tokens_equal"] == 1.0
        assert out["lp_tp"] <= 1e-5 and out["lp_sync"] <= 1e-5
        assert out["peak_extra"] == out["largest"] < out["model"] / 4
        assert out["changed"] == 1.0  # the synced weights (seed 1) decode other tokens than seed 0's
