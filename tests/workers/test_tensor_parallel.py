"""Tensor parallelism (gloo on CPU, fp32): the TP-split actor and critic equal the whole model.

- tp=2 on 2 ranks vs the same model unsplit in the same process: log-probs, entropy, values,
  policy loss and every gradient (DTensor shards made whole) within 1e-5.
- FSDP2 2 × TP 2 on 4 ranks (engines built as the workers build them) vs one process on the whole
  batch: one optimizer step of the actor and of the critic, the loss metric and every updated
  parameter within 1e-5.
"""

from __future__ import annotations

import os
import types

import pytest
import torch
from dist_helpers import spawn_ranks

from verl.config.errors import ConfigError
from verl.workers.sharding.tensor_parallel import build_layout, check_tp_heads

P, R, B = 10, 6, 8


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
    b["values"] = torch.randn(B, R, generator=g) * 0.1
    b["returns"] = torch.randn(B, R, generator=g)
    return b


def _models(model_dir: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    from verl.config.schema import ModelConfig
    from verl.modules import create_model

    torch.manual_seed(0)
    actor, critic = (
        create_model("actor", ModelConfig(path=model_dir)),
        create_model("critic", ModelConfig(path=model_dir)),
    )
    with torch.no_grad():  # a zero value head (the default) would make every value 0 at any TP degree
        critic.value_head.weight.copy_(
            torch.linspace(-0.1, 0.1, critic.value_head.weight.numel()).view_as(critic.value_head.weight)
        )
    return actor, critic


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _forward_backward(actor: torch.nn.Module, critic: torch.nn.Module) -> dict[str, torch.Tensor]:
    from verl.config.schema import ActorConfig
    from verl.engine import GlobalCounts
    from verl.modules.forward import compute_log_probs_and_entropy, compute_values
    from verl.protocol import DataProto
    from verl.workers.actor import policy_loss_fn

    b = _batch()
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], R)
    lp, ent = compute_log_probs_and_entropy(actor, *args, temperature=0.7, remove_padding=True)
    counts = GlobalCounts(tokens=float(b["response_mask"].sum()), sequences=float(B))
    loss, _ = policy_loss_fn(ActorConfig(entropy_coeff=0.01, use_kl_loss=False), 0.7, remove_padding=True)(
        actor, DataProto.from_dict(tensors=b), counts
    )
    values = compute_values(critic, *args, remove_padding=False)
    (loss + values.pow(2).mean()).backward()
    grads = torch.cat([_full(p.grad).flatten() for m in (actor, critic) for p in m.parameters()])
    return {"lp": lp.detach(), "ent": ent.detach(), "values": values.detach(), "loss": loss.detach(), "grads": grads}


def _init(rank: int, port: int, world: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _tp2_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    _init(rank, port, 2)
    try:
        ref = _forward_backward(*_models(model_dir))
        layout = build_layout(1, 2, 2)
        actor, critic = _models(model_dir)
        for m in (actor, critic):
            layout.prepare(m)
        sharded = any(hasattr(p, "device_mesh") for p in actor.parameters())
        tp = _forward_backward(actor, critic)
        diffs = {k: float((tp[k] - ref[k]).abs().max()) for k in ref}
        diffs.update(grad_scale=float(ref["grads"].abs().max()), sharded=float(sharded))
        torch.save(diffs, os.path.join(out_dir, f"diffs{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # two spawned processes
@pytest.mark.timeout(300)
def test_tp2_actor_and_critic_forward_backward_equal_tp1(tiny_model_dir, tmp_path):
    spawn_ranks(_tp2_main, 2, str(tiny_model_dir), str(tmp_path))
    for rank in (0, 1):
        diffs = torch.load(tmp_path / f"diffs{rank}.pt")
        print(rank, diffs)
        assert diffs["sharded"] == 1.0 and diffs["grad_scale"] > 1e-3
        for key in ("lp", "ent", "values", "loss", "grads"):
            assert diffs[key] <= 1e-5, (rank, key, diffs[key])


def _engines(model_dir: str, layout: object, world: int) -> tuple[object, object]:
    from verl.config.schema import FSDPConfig, OptimConfig
    from verl.engine import build_engine
    from verl.workers.sharding.tensor_parallel import shard_kwargs

    actor, critic = _models(model_dir)
    if layout is not None:
        for m in (actor, critic):
            layout.prepare(m)
    kw = shard_kwargs(layout, world) if layout is not None else {"world_size": 1}
    optim = OptimConfig(lr=1e-2)
    return tuple(
        build_engine(m, FSDPConfig(), optim=optim, total_steps=1, grad_clip=0.05, **kw) for m in (actor, critic)
    )


def _one_step(engines: tuple, data: object) -> dict[str, object]:
    from verl.config.schema import ActorConfig, CriticConfig
    from verl.engine import MicroBatchSpec
    from verl.workers.actor import policy_loss_fn
    from verl.workers.critic import value_loss_fn

    actor, critic = engines
    critic_cfg = CriticConfig()
    critic_cfg.model.use_remove_padding = True
    a = actor.train_batch(
        data, policy_loss_fn(ActorConfig(entropy_coeff=0.01, use_kl_loss=False), 0.7, True), MicroBatchSpec(2)
    )
    c = critic.train_batch(data, value_loss_fn(critic_cfg), MicroBatchSpec(2))
    params = {
        f"{i}.{n}": _full(p.detach()).clone() for i, e in enumerate(engines) for n, p in e.module.named_parameters()
    }
    return {
        "pg_loss": a.metrics["actor/pg_loss"],
        "vf_loss": c.metrics["critic/vf_loss"],
        "grad_norm": (a.grad_norm, c.grad_norm),
        "params": params,
    }


def _fsdp_tp_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.protocol import DataProto

    _init(rank, port, 4)
    try:
        layout = build_layout(1, 2, 4)
        engines = _engines(model_dir, layout, 4)
        data = layout.gather(
            DataProto.from_dict(tensors=_batch()).chunk(4)[rank]
        )  # the controller's chunk, then the TP group's rows
        with layout.scope():
            out = _one_step(engines, data)
        if rank == 0:
            torch.save(out, os.path.join(out_dir, "fsdp_tp.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # four spawned processes
@pytest.mark.timeout(600)
def test_fsdp2_x_tp2_on_4_ranks_equals_one_process(tiny_model_dir, tmp_path):
    from verl.protocol import DataProto

    ref = _one_step(_engines(str(tiny_model_dir), None, 1), DataProto.from_dict(tensors=_batch()))
    spawn_ranks(_fsdp_tp_main, 4, str(tiny_model_dir), str(tmp_path))
    got = torch.load(tmp_path / "fsdp_tp.pt")
    print({k: (ref[k], got[k]) for k in ("pg_loss", "vf_loss", "grad_norm")})
    assert abs(got["pg_loss"] - ref["pg_loss"]) <= 1e-5 and abs(got["vf_loss"] - ref["vf_loss"]) <= 1e-5
    for a, b in zip(got["grad_norm"], ref["grad_norm"], strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b))
    assert ref["params"].keys() == got["params"].keys()
    moved = max(
        float((ref["params"][k] - _engines_initial(k, tiny_model_dir)).abs().max()) for k in list(ref["params"])[:3]
    )
    assert moved > 1e-4  # the step changed the weights
    for k, v in ref["params"].items():
        assert float((got["params"][k] - v).abs().max()) <= 1e-5, k


def _engines_initial(key: str, model_dir: object) -> torch.Tensor:
    actor, critic = _models(str(model_dir))
    role, name = key.split(".", 1)
    return dict((actor, critic)[int(role)].named_parameters())[name].detach()


def test_heads_not_divisible_by_tp_is_one_config_line():
    cfg = types.SimpleNamespace(model_type="qwen2", num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
    with pytest.raises(
        ConfigError, match=r"tensor_parallel_size=4 does not divide the model's num_key_value_heads=2"
    ) as err:
        check_tp_heads(cfg, 4)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="num_attention_heads=4"):
        check_tp_heads(cfg, 3)
    check_tp_heads(cfg, 2)


def test_architecture_without_a_plan_is_one_config_line():
    cfg = types.SimpleNamespace(model_type="gpt2", num_attention_heads=4, num_key_value_heads=4, intermediate_size=128)
    with pytest.raises(ConfigError, match=r"no tensor-parallel plan for architecture 'gpt2'") as err:
        check_tp_heads(cfg, 2)
    assert "\n" not in str(err.value)
