"""Tensor parallelism with LoRA (peft) adapters (verl/workers/sharding/tp_lora.py).

- The plan: a LoRA layer's entry moves to its base layer; ``lora_B`` follows a column-parallel
  base, ``lora_A`` a row-parallel one; plain layers keep theirs (no process group needed).
- tp=2 on 2 gloo ranks (fp32) vs the same LoRA actor unsplit: log-probs, the policy loss and the
  gradient of every adapter matrix (DTensor shards made whole) within 1e-5; the adapters split as
  the plan says.
"""

from __future__ import annotations

import os

import pytest
import torch
from dist_helpers import spawn_ranks

from verl.config.errors import ConfigError

P, R, B = 10, 6, 8


def _lora_actor(model_dir: str, targets: str = "all-linear") -> torch.nn.Module:
    from verl.config.schema import ModelConfig
    from verl.modules import create_model

    torch.manual_seed(0)
    actor = create_model("actor", ModelConfig(path=model_dir, lora_rank=4, lora_alpha=8, target_modules=targets))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # lora_B starts at 0 (no lora_A gradient): give both adapters values
        for name, p in actor.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return actor


def test_block_plan_places_lora_b_on_column_and_lora_a_on_row_layers(tiny_model_dir):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from verl.workers.sharding.tensor_parallel import tp_plan
    from verl.workers.sharding.tp_lora import block_plan

    actor = _lora_actor(str(tiny_model_dir), targets="q_proj,o_proj,up_proj")
    block = actor.base_model.model.model.layers[0]
    plan = block_plan(block, tp_plan())
    kinds = {name: type(style) for name, style in plan.items()}
    assert kinds == {
        "self_attn.q_proj.base_layer": ColwiseParallel,
        "self_attn.q_proj.lora_B.default": ColwiseParallel,
        "self_attn.k_proj": ColwiseParallel,
        "self_attn.v_proj": ColwiseParallel,
        "mlp.gate_proj": ColwiseParallel,
        "mlp.up_proj.base_layer": ColwiseParallel,
        "mlp.up_proj.lora_B.default": ColwiseParallel,
        "self_attn.o_proj.base_layer": RowwiseParallel,
        "self_attn.o_proj.lora_A.default": RowwiseParallel,
        "mlp.down_proj": RowwiseParallel,
    }
    assert plan["self_attn.q_proj.lora_B.default"] is not plan["self_attn.q_proj.base_layer"]  # a fresh style each


def test_dora_is_one_config_line(tiny_model_dir):
    from verl.workers.sharding.tensor_parallel import tp_plan
    from verl.workers.sharding.tp_lora import block_plan

    block = _lora_actor(str(tiny_model_dir), targets="q_proj").base_model.model.model.layers[0]
    block.self_attn.q_proj.use_dora["default"] = True
    with pytest.raises(ConfigError, match="DoRA") as err:
        block_plan(block, tp_plan())
    assert "\n" not in str(err.value)


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    mask = torch.zeros(B, P + R, dtype=torch.long)
    for i in range(B):
        p, r = 1 + (3 * i) % P, 1 + (5 * i) % R
        mask[i, P - p : P + r] = 1
    ids = ids * mask
    b = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, P:],
        "response_mask": mask[:, P:],
    }
    b["advantages"] = torch.randn(B, R, generator=g)
    b["old_log_probs"] = -torch.rand(B, R, generator=g) * 3
    return b


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _forward_backward(actor: torch.nn.Module) -> dict[str, torch.Tensor]:
    from verl.config.schema import ActorConfig
    from verl.engine import GlobalCounts
    from verl.modules.forward import compute_log_probs
    from verl.protocol import DataProto
    from verl.workers.actor import policy_loss_fn

    b = _batch()
    lp = compute_log_probs(actor, b["input_ids"], b["attention_mask"], b["position_ids"], R, temperature=0.7)
    counts = GlobalCounts(tokens=float(b["response_mask"].sum()), sequences=float(B))
    loss, _ = policy_loss_fn(ActorConfig(use_kl_loss=False), 0.7, remove_padding=True)(
        actor, DataProto.from_dict(tensors=b), counts
    )
    loss.backward()
    grads = {n: _full(p.grad).detach().clone() for n, p in actor.named_parameters() if p.requires_grad}
    return {"lp": lp.detach(), "loss": loss.detach(), "grads": grads}


def _tp2_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.workers.sharding.tensor_parallel import build_layout

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        ref = _forward_backward(_lora_actor(model_dir))
        layout = build_layout(1, 2, 2)
        actor = _lora_actor(model_dir)
        layout.prepare(actor)
        attn = actor.base_model.model.model.layers[0].self_attn
        placed = {
            "q_B": str(attn.q_proj.lora_B["default"].weight.placements),
            "q_A": hasattr(attn.q_proj.lora_A["default"].weight, "device_mesh"),
            "o_A": str(attn.o_proj.lora_A["default"].weight.placements),
            "o_B": hasattr(attn.o_proj.lora_B["default"].weight, "device_mesh"),
        }
        tp = _forward_backward(actor)
        out = {
            "lp": float((tp["lp"] - ref["lp"]).abs().max()),
            "loss": float((tp["loss"] - ref["loss"]).abs()),
            "names": sorted(tp["grads"]) == sorted(ref["grads"]),
            "n": len(ref["grads"]),
            "placed": placed,
            "grad": max(float((tp["grads"][n] - g).abs().max()) for n, g in ref["grads"].items()),
            "grad_rel": max(float((tp["grads"][n] - g).abs().max() / g.abs().max()) for n, g in ref["grads"].items()),
            "grad_scale": min(float(g.abs().max()) for g in ref["grads"].values()),
        }
        torch.save(out, os.path.join(out_dir, f"out{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_tp2_lora_forward_and_adapter_grads_equal_tp1(tiny_model_dir, tmp_path):
    spawn_ranks(_tp2_main, 2, str(tiny_model_dir), str(tmp_path))
    for rank in (0, 1):
        out = torch.load(tmp_path / f"out{rank}.pt")
        print(rank, out)
        assert out["names"] and out["n"] == 2 * 2 * 7  # 2 layers x 7 linear layers x (A, B): only adapters train
        assert out["placed"] == {"q_B": "(Shard(dim=0),)", "q_A": False, "o_A": "(Shard(dim=1),)", "o_B": False}
        assert out["grad_scale"] > 1e-6  # every adapter matrix gets a gradient
        assert out["lp"] <= 1e-5 and out["loss"] <= 1e-5 and out["grad"] <= 1e-5
        assert out["grad_rel"] <= 1e-4  # also relative to each matrix's own gradient (some are ~1e-4)


@pytest.mark.slow  # two Ray runs of 2 workers (~3 min on a loaded CPU); the gloo test above covers the split itself
@pytest.mark.ray
def test_lora_grpo_at_tp2_equals_tp1_on_ray_with_the_adapter_free_reference(tmp_path):
    """2 GRPO steps, LoRA, KL loss against the actor with adapters off: tp=2 (one data-parallel rank)
    equals tp=1 (data parallel 2). The reference forward of the TP-split actor runs on its TP group's
    rows (a rank alone on its own rows would sum partial products of different rows)."""
    import ray
    from run_helpers import read_metrics

    from tests.trainer.ppo.test_split_rollout import builtin_overrides
    from verl.config import load_config
    from verl.trainer import RLTrainer

    runs = {}
    for tp in (1, 2):
        d = tmp_path / f"tp{tp}"
        RLTrainer(
            config=load_config(
                None,
                builtin_overrides(
                    d,
                    **{
                        "trainer.n_gpus_per_node": 2,
                        "actor_rollout_ref.model.lora_rank": 4,
                        "actor_rollout_ref.model.lora_alpha": 8,
                        "actor_rollout_ref.actor.fsdp_config.tensor_parallel_size": tp,
                        "trainer.total_training_steps": 2,
                        "trainer.test_freq": -1,
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
                        "actor_rollout_ref.actor.use_kl_loss": True,
                    },
                ),
            )
        ).fit()
        ray.shutdown()
        runs[tp] = read_metrics(d)
    keys = ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "critic/score/mean")
    print({s: {k: (runs[1][s][k], runs[2][s][k]) for k in keys} for s in (1, 2)})
    assert runs[2][2]["actor/kl_loss"] > 1e-6  # the adapters moved the policy away from the reference
    for step in (1, 2):
        for key in keys:
            assert abs(runs[2][step][key] - runs[1][step][key]) <= 1e-5 * max(1.0, abs(runs[1][step][key])), (step, key)
