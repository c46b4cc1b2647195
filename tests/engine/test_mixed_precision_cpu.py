"""``fsdp_config.mixed_precision`` at world size 1 (issue 14, Deliver 4): the forwards really run in
bf16 (autocast) while parameters, gradients and AdamW stay float32; the fused LM head follows."""

from __future__ import annotations

import torch

from verl.config.schema import ActorConfig, FSDPConfig, ModelConfig, OptimConfig
from verl.engine import MicroBatchSpec
from verl.engine.fsdp_engine import build_engine
from verl.modules import create_model
from verl.modules.forward import compute_log_probs_and_entropy
from verl.protocol import DataProto
from verl.workers.actor import compute_log_prob, policy_loss_fn


def _batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (4, 10), generator=g)
    mask = torch.ones(4, 10, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, -2:] = 0
    return DataProto.from_dict(
        tensors={
            "input_ids": ids * mask,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": (ids * mask)[:, 6:],
            "response_mask": mask[:, 6:],
            "advantages": torch.randn(4, 4, generator=g),
        }
    )


def _engine(model_dir, mixed: str | None):
    torch.manual_seed(0)
    module = create_model("actor", ModelConfig(path=str(model_dir)))
    return build_engine(module, FSDPConfig(mixed_precision=mixed), 1, optim=OptimConfig(lr=1e-3))


def test_bf16_mixed_precision_runs_matmuls_in_bf16_with_float32_master(tiny_model_dir):
    seen: list[torch.dtype] = []
    results = {}
    for mixed in (None, "bfloat16"):
        engine = _engine(tiny_model_dir, mixed)
        assert engine.autocast_dtype == (torch.bfloat16 if mixed else None)
        proj = engine.module.model.layers[0].mlp.up_proj
        hook = proj.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
        lp, _ = compute_log_prob(engine, _batch(), 1.0, MicroBatchSpec(None, False, 0), remove_padding=True)
        step = engine.train_batch(
            _batch(), policy_loss_fn(ActorConfig(), 1.0, remove_padding=True), MicroBatchSpec(None, False, 0)
        )
        hook.remove()
        assert all(p.dtype == torch.float32 for p in engine.module.parameters())  # float32 master weights
        assert all(s["exp_avg"].dtype == torch.float32 for s in engine.optimizer.state.values())
        results[mixed] = (lp, step.grad_norm)
    # per engine: the packing probe's two forwards (once per model, under the same autocast), then
    # the inference and the training forward
    assert seen == [torch.float32] * 4 + [torch.bfloat16] * 4
    (lp32, gn32), (lp16, gn16) = results[None], results["bfloat16"]
    diff = (lp32 - lp16).abs().max()
    assert 0 < diff < 0.1  # really bf16, and close to float32
    assert abs(gn32 - gn16) / gn32 < 0.1


def test_fused_head_under_autocast_equals_the_models_own_head(tiny_model_dir, monkeypatch):
    import verl.modules.forward as fwd

    b = _batch().batch
    args = (b["input_ids"], b["attention_mask"], b["position_ids"], 4)
    out = {}
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(fwd, "fused_lm_head", lambda module: None)
        torch.manual_seed(0)
        module = create_model("actor", ModelConfig(path=str(tiny_model_dir)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp, _ = compute_log_probs_and_entropy(module, *args, compute_entropy=False, remove_padding=True)
        lp.sum().backward()
        out[fused] = (lp.detach(), module.lm_head.weight.grad)
        assert module.lm_head.weight.grad.dtype == torch.float32
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-2, rtol=0)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-2, rtol=0.05)


def test_verls_mixed_precision_mapping_overrides():
    import pytest

    from verl.config import load_config
    from verl.config.errors import ConfigError

    cfg = load_config(
        None,
        [
            "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
        ],
    )
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision == "bfloat16"
    with pytest.raises(ConfigError, match="reduce_dtype` is not supported yet"):
        load_config(None, ["actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16"])
