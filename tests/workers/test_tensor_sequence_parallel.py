"""Tensor parallelism together with Ulysses sequence parallelism (gloo on CPU, fp32).

4 spawned ranks at tp=2, sp=2, dp=1 (the mesh ``(dp, sp, tp)``: FSDP2 over ``dp_sp``, the blocks
split over ``tp``, the packed sequences over ``sp``) vs the whole model in one process (each rank
computes the reference itself): log-probs, entropy, values, the policy and value losses and every
gradient (shards made whole) within 1e-5. The packed rows are 13 tokens wide, so each rank's
forward pads them to 14 columns (a sequence length not divisible by sp).
"""

from __future__ import annotations

import math
import os
import types

import pytest
import torch
from dist_helpers import spawn_ranks

from verl.config.errors import ConfigError

P, R = 8, 5
# (prompt, response) lengths: the longest (13) sets the packed width, odd -> padded under sp=2
LENGTHS = [(3, 5), (8, 5), (5, 2), (1, 4)]
TEMPERATURE = 0.7


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    b = len(LENGTHS)
    ids = torch.randint(3, 120, (b, P + R), generator=g)
    mask = torch.zeros(b, P + R, dtype=torch.long)
    for i, (p, r) in enumerate(LENGTHS):
        mask[i, P - p : P + r] = 1
    ids = ids * mask
    out = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, P:],
        "response_mask": mask[:, P:],
    }
    out["advantages"] = torch.randn(b, R, generator=g)
    # near the random model's log-probs (about -log V): ratios inside the clip range, so the
    # policy-gradient term (not only the entropy bonus) reaches the gradients
    out["old_log_probs"] = -math.log(128) + 0.05 * torch.randn(b, R, generator=g)
    out["values"] = torch.randn(b, R, generator=g) * 0.1
    out["returns"] = torch.randn(b, R, generator=g)
    return out


def _write_model(out_dir: str) -> str:
    """A tiny Qwen2 with 4 heads and 4 KV heads: 2 per TP rank, 1 per (TP, SP) rank."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(
        "qwen2",
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out_dir)
    return out_dir


def _engines(model_dir: str, layout: object) -> tuple[object, object]:
    from verl.config.schema import FSDPConfig, ModelConfig, OptimConfig
    from verl.engine import build_engine
    from verl.modules import create_model
    from verl.workers.sharding.tensor_parallel import shard_kwargs

    torch.manual_seed(0)
    actor, critic = (
        create_model("actor", ModelConfig(path=model_dir)),
        create_model("critic", ModelConfig(path=model_dir)),
    )
    with torch.no_grad():  # a zero value head (the default) would make every value 0 in any layout
        w = critic.value_head.weight
        w.copy_(torch.linspace(-0.1, 0.1, w.numel()).view_as(w))
    if layout is not None:
        for m in (actor, critic):
            layout.prepare(m)
    kw = shard_kwargs(layout, 4) if layout is not None else {"world_size": 1}
    optim = OptimConfig(lr=1e-2)
    return tuple(build_engine(m, FSDPConfig(), optim=optim, total_steps=1, **kw) for m in (actor, critic))


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _forward_backward(engines: tuple, data: object) -> dict[str, torch.Tensor]:
    """Log-probs, entropy and values (no grad), then one backward of the actor's and the critic's losses."""
    from verl.config.schema import ActorConfig, CriticConfig
    from verl.engine import GlobalCounts, MicroBatchSpec
    from verl.modules.forward import compute_values
    from verl.workers.actor import compute_log_prob, policy_loss_fn
    from verl.workers.critic import value_loss_fn

    actor, critic = engines
    lp, ent = compute_log_prob(
        actor, data, TEMPERATURE, MicroBatchSpec(None), calculate_entropy=True, remove_padding=True
    )
    b = data.batch
    with torch.no_grad():
        values = compute_values(
            critic.module, b["input_ids"], b["attention_mask"], b["position_ids"], R, remove_padding=True
        )
    critic_cfg = CriticConfig()
    critic_cfg.model.use_remove_padding = True
    # the engine's counts sum over the enclosing scope's dp group (the world outside one): the whole batch's here
    counts = GlobalCounts(tokens=float(b["response_mask"].sum()), sequences=float(len(data)))
    pg = actor.forward_backward(
        data, policy_loss_fn(ActorConfig(entropy_coeff=0.01, use_kl_loss=False), TEMPERATURE, True), counts
    )
    vf = critic.forward_backward(data, value_loss_fn(critic_cfg), counts)
    grads = torch.cat([_full(p.grad).flatten() for e in engines for p in e.module.parameters()])
    return {
        "lp": lp,
        "ent": ent,
        "values": values.detach(),
        "pg_loss": torch.tensor(pg["actor/pg_loss"]),
        "vf_loss": torch.tensor(vf["critic/vf_loss"]),
        "grads": grads,
    }


def _rank_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from verl.modules.sp_packing import split_forward_count
    from verl.protocol import DataProto
    from verl.workers.sharding.tensor_parallel import build_layout

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=4)
    try:
        whole = DataProto.from_dict(tensors=_batch())
        ref = _forward_backward(_engines(model_dir, None), whole)
        layout = build_layout(2, 2, 4)
        engines = _engines(model_dir, layout)
        data = layout.gather(whole.chunk(4)[rank])  # the controller's chunk, then the rows of the sp x tp ranks
        before = split_forward_count()
        with layout.scope():
            got = _forward_backward(engines, data)
            counted = engines[0].global_counts(data, "response_mask").tokens  # summed over dp (1 rank) only
        q = engines[0].module.model.layers[0].self_attn.q_proj.weight
        diffs = {k: float((got[k] - ref[k]).abs().max()) for k in ref}
        diffs.update(
            grad_scale=float(ref["grads"].abs().max()),
            split_forwards=float(split_forward_count() - before),
            mesh=str(tuple(q.device_mesh.mesh_dim_names)),
            dp=float(layout.dp),
            counted=counted - float(whole.batch["response_mask"].sum()),
            ref_pg_loss=float(ref["pg_loss"]),
            ref_vf_loss=float(ref["vf_loss"]),
        )
        torch.save(diffs, os.path.join(out_dir, f"diffs{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.e2e  # four spawned processes
@pytest.mark.timeout(600)
def test_fsdp_x_sp2_x_tp2_on_4_ranks_equals_one_process(tmp_path):
    model_dir = _write_model(str(tmp_path / "model"))
    spawn_ranks(_rank_main, 4, model_dir, str(tmp_path))
    for rank in range(4):
        diffs = torch.load(tmp_path / f"diffs{rank}.pt")
        print(rank, diffs)
        # FSDP2 over dp_sp and TP over tp: the parameters are 2-D DTensors; the forwards ran split over sp
        assert diffs["mesh"] == "('dp_sp', 'tp')" and diffs["dp"] == 1.0 and diffs["split_forwards"] >= 4
        assert diffs["counted"] == 0.0  # the engine's token count inside the scope: the batch's, not 4 copies
        assert diffs["grad_scale"] > 1e-3 and abs(diffs["ref_pg_loss"]) > 1e-3 and diffs["ref_vf_loss"] > 1e-3
        for key in ("lp", "ent", "values", "pg_loss", "vf_loss", "grads"):
            assert diffs[key] <= 1e-5, (rank, key, diffs[key])


def test_heads_per_tp_rank_not_divisible_by_sp_is_one_config_line():
    from verl.workers.sharding.tensor_parallel import check_tp_sp_heads

    cfg = types.SimpleNamespace(model_type="qwen2", num_attention_heads=8, num_key_value_heads=2, intermediate_size=128)
    with pytest.raises(
        ConfigError,
        match=r"ulysses_sequence_parallel_size=2 does not divide the num_key_value_heads one "
        r"tensor-parallel rank holds: num_key_value_heads=2 / tensor_parallel_size=2 = 1",
    ) as err:
        check_tp_sp_heads(cfg, 2, 2)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"num_attention_heads=8 / tensor_parallel_size=2 = 4"):
        check_tp_sp_heads(
            types.SimpleNamespace(
                model_type="qwen2", num_attention_heads=8, num_key_value_heads=8, intermediate_size=128
            ),
            2,
            8,
        )
    check_tp_sp_heads(
        types.SimpleNamespace(model_type="qwen2", num_attention_heads=8, num_key_value_heads=4, intermediate_size=128),
        2,
        2,
    )


def _worker_config(model_dir: str, tp: int, sp: int) -> object:
    from verl.config import load_config

    cfg = load_config(
        None,
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"trainer.n_gpus_per_node={tp * sp}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.hybrid_engine=false",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            "actor_rollout_ref.actor.entropy_coeff=0.01",
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}",
            f"actor_rollout_ref.actor.fsdp_config.tensor_parallel_size={tp}",
        ],
    )
    return cfg.actor_rollout_ref


def _worker_steps(worker: object, data: object) -> dict[str, object]:
    """Log-probs, one PPO update (its metrics), log-probs after it."""
    worker.init_model(total_training_steps=1)
    lp = worker.compute_log_prob(data)
    metrics = worker.update_actor(data.union(lp)).meta_info["metrics"]
    return {
        "lp": lp.batch["old_log_probs"],
        "ent": lp.batch["entropys"],
        "after": worker.compute_log_prob(data).batch["old_log_probs"],
        **{k: metrics[k] for k in ("actor/pg_loss", "actor/entropy", "actor/grad_norm")},
    }


def _worker_data() -> object:
    from verl.protocol import DataProto

    b = _batch()
    return DataProto.from_dict(
        tensors={
            k: b[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "advantages")
        }
    )


def _worker_rank_main(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    os.environ.update(
        RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    worker = ActorRolloutRefWorker(_worker_config(model_dir, 2, 2), seed=1, device="cpu")
    import torch.distributed as dist

    try:
        torch.save(_worker_steps(worker, _worker_data().chunk(4)[rank]), os.path.join(out_dir, f"worker{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # four spawned workers and one in process; the engine test above covers the same math faster
@pytest.mark.timeout(900)
def test_actor_worker_at_sp2_tp2_on_4_ranks_equals_one_local_worker(tmp_path):
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    model_dir = _write_model(str(tmp_path / "model"))
    ref = _worker_steps(ActorRolloutRefWorker(_worker_config(model_dir, 1, 1), seed=1, device="cpu"), _worker_data())
    spawn_ranks(_worker_rank_main, 4, model_dir, str(tmp_path))
    assert (
        float((ref["after"] - ref["lp"]).abs().max()) > 1e-3 and ref["actor/grad_norm"] > 1e-3
    )  # the update moved the policy
    for rank in range(4):
        got = torch.load(tmp_path / f"worker{rank}.pt")
        rows = slice(rank, rank + 1)  # 4 rows, one per rank
        diffs = {k: float((got[k] - ref[k][rows]).abs().max()) for k in ("lp", "ent", "after")}
        diffs.update({k: abs(got[k] - ref[k]) for k in ("actor/pg_loss", "actor/entropy", "actor/grad_norm")})
        print(rank, diffs)
        for key, value in diffs.items():
            assert value <= 1e-5, (rank, key, value)
