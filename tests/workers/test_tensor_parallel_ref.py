"""The reference policy at ``ref.fsdp_config.tensor_parallel_size`` equal to the actor's
(`verl.workers.fsdp_workers.build_reference_engine`): the actor's TP plan, FSDP2 over the actor's
data-parallel dims, forwards on the TP group's rows.

- 2 gloo ranks (fp32): the TP=2 reference's log-probs equal the unsplit reference's within 1e-5,
  its decoder projections are TP slices.
- slow, Ray: 2 GRPO steps with the KL loss, actor tp=2, reference tp=2 equals reference tp=1.
"""

from __future__ import annotations

import os

import pytest
import torch
from dist_helpers import spawn_ranks

P, R, B = 10, 6, 8


def _batch():
    from verl.protocol import DataProto

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    mask = torch.zeros(B, P + R, dtype=torch.long)
    for i in range(B):
        p, r = 1 + (3 * i) % P, 1 + (5 * i) % R
        mask[i, P - p : P + r] = 1
    ids = ids * mask
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    )


def _log_probs(module: torch.nn.Module, data) -> object:
    from verl.modules.forward import compute_log_probs
    from verl.protocol import DataProto

    b = data.batch
    with torch.no_grad():
        lp = compute_log_probs(module, b["input_ids"], b["attention_mask"], b["position_ids"], R, temperature=0.7)
    return DataProto.from_dict(tensors={"lp": lp})


def _rank_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.config.schema import FSDPConfig, ModelConfig
    from verl.modules import create_model
    from verl.workers.fsdp_workers import build_reference_engine
    from verl.workers.sharding.tensor_parallel import build_layout

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        mine = _batch().chunk(2)[rank]  # the controller's chunk of this rank
        whole = create_model("ref", ModelConfig(path=model_dir)).requires_grad_(False)
        expected = _log_probs(whole, mine).batch["lp"]
        layout = build_layout(1, 2, 2)
        engine = build_reference_engine(
            create_model("ref", ModelConfig(path=model_dir)).requires_grad_(False),
            FSDPConfig(),
            layout,
            ref_sp=False,
            ref_tp=True,
            world_size=2,
        )
        got = layout.run(mine, lambda d: _log_probs(engine.module, d)).batch["lp"]
        q = engine.module.model.layers[0].self_attn.q_proj.weight
        out = {
            "lp": float((got - expected).abs().max()),
            "placements": str(getattr(q, "placements", None)),
            "rows": got.shape[0],
        }
        torch.save(out, os.path.join(out_dir, f"out{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_tp2_reference_log_probs_equal_the_unsplit_reference(tiny_model_dir, tmp_path):
    spawn_ranks(_rank_main, 2, str(tiny_model_dir), str(tmp_path))
    for rank in (0, 1):
        out = torch.load(tmp_path / f"out{rank}.pt")
        print(rank, out)
        assert out["placements"] == "(Shard(dim=0),)" and out["rows"] == B // 2  # TP-split, this rank's rows back
        assert out["lp"] <= 1e-5


@pytest.mark.slow  # two Ray runs of 2 workers (~3 min on a loaded CPU); the gloo test above covers the split itself
@pytest.mark.ray
def test_kl_against_a_tp2_reference_equals_an_unsplit_reference_on_ray(tmp_path):
    import ray
    from run_helpers import read_metrics

    from tests.trainer.ppo.test_split_rollout import builtin_overrides
    from verl.config import load_config
    from verl.trainer import RLTrainer

    runs = {}
    for ref_tp in (1, 2):
        d = tmp_path / f"ref_tp{ref_tp}"
        RLTrainer(
            config=load_config(
                None,
                builtin_overrides(
                    d,
                    **{
                        "trainer.n_gpus_per_node": 2,
                        "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size": 2,
                        "actor_rollout_ref.ref.fsdp_config.tensor_parallel_size": ref_tp,
                        "trainer.total_training_steps": 2,
                        "trainer.test_freq": -1,
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
                        "actor_rollout_ref.actor.use_kl_loss": True,
                    },
                ),
            )
        ).fit()
        ray.shutdown()
        runs[ref_tp] = read_metrics(d)
    keys = ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "critic/score/mean")
    print({s: {k: (runs[1][s][k], runs[2][s][k]) for k in keys} for s in (1, 2)})
    assert runs[2][2]["actor/kl_loss"] > 1e-6  # the update moved the policy away from the reference
    for step in (1, 2):
        for key in keys:
            assert abs(runs[2][step][key] - runs[1][step][key]) <= 1e-5 * max(1.0, abs(runs[1][step][key])), (step, key)
