"""Weight-sync attestation (`verl.workers.sync_attest`): each deliberate sync fault is caught by name.

The colocated in-place path (`SyncedRollout` with an engine holding its own module) and the vLLM
path (`EngineWeightSync` into `VerlWorkerExtension`, its worker RPC, on a stand-in model runner:
vLLM itself is not needed to check what the worker received) each get: a clean run that never
trips, a sync that skips a tensor, one that keeps a stale LoRA adapter, a dtype cast on the way
and an engine whose weights are perturbed by 1e-3.
"""

from __future__ import annotations

import copy
import logging
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from verl.config.schema import FSDPConfig, ModelConfig, OptimConfig
from verl.config.schema_attest import SyncCheckConfig
from verl.engine import build_engine
from verl.modules import create_model
from verl.utils.weight_fingerprint import fingerprint, sample_positions
from verl.workers import rollout_sync
from verl.workers.rollout import weight_sync
from verl.workers.rollout.vllm.vllm_weights import EngineWeightSync
from verl.workers.rollout.vllm.vllm_worker_ext import VerlWorkerExtension
from verl.workers.rollout_sync import SyncedRollout
from verl.workers.sync_attest import SyncAttestationError, SyncAttestor, module_canary
from verl.workers.sync_attest_sides import attest_engine

Q = "model.layers.0.self_attn.q_proj.weight"


# ------------------------------------------------------------------------------ fingerprints
def test_samples_are_strided_and_include_the_last_element():
    assert sample_positions(5, 64).tolist() == [0, 1, 2, 3, 4]
    pos = sample_positions(1000, 8)
    assert pos.tolist() == [0, 125, 250, 375, 500, 625, 750, 999]


def test_a_bf16_engine_matches_the_fp32_actor_cast_as_the_load_casts_it():
    torch.manual_seed(0)
    actor = torch.randn(300, 7)
    engine = actor.to(torch.bfloat16)
    assert fingerprint(engine).digest == fingerprint(actor, torch.bfloat16).digest
    assert fingerprint(engine).digest != fingerprint(actor).digest  # hashed in fp32: other bits
    rounded_twice = actor.to(torch.float16).to(torch.bfloat16)  # a cast through fp16 on the way
    assert fingerprint(engine).digest == fingerprint(engine.clone()).digest
    assert fingerprint(rounded_twice).dtype == fingerprint(engine).dtype == "torch.bfloat16"
    perturbed = (actor + 1e-3).to(torch.bfloat16)
    assert fingerprint(perturbed).digest != fingerprint(engine).digest


# ------------------------------------------------------------------ colocated in-place (hf)
def _actor(model_dir, lora_rank: int = 0):
    torch.manual_seed(0)
    cfg = ModelConfig(path=str(model_dir), lora_rank=lora_rank, lora_alpha=8)
    return build_engine(create_model("actor", cfg), FSDPConfig(), 1, optim=OptimConfig(lr=1e-2))


def _train(actor) -> None:
    """A stand-in update: every trainable parameter moves (as an optimizer step would)."""
    with torch.no_grad():
        for p in actor.module.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 1e-2)


def _run(actor, rollout: SyncedRollout, steps: int) -> list[dict[str, float]]:
    out = []
    for _ in range(steps):
        rollout.sync_weights(actor)
        out.append(rollout.take_sync_metrics())
        _train(actor)
        rollout.mark_stale()
    return out


def _synced(actor, **check) -> SyncedRollout:
    engine = SimpleNamespace(module=copy.deepcopy(actor.module).requires_grad_(False))
    rollout = SyncedRollout(engine, shared=False, sync_check=SyncCheckConfig(**{"canary_every": 2, **check}))
    rollout.mark_stale()
    return rollout


def test_clean_in_place_syncs_never_trip_and_report_metrics(tiny_model_dir):
    actor = _actor(tiny_model_dir)
    metrics = _run(actor, _synced(actor), 3)
    assert [m["sync/fingerprint_match"] for m in metrics] == [1.0, 1.0, 1.0]
    assert [m["sync/policy_version"] for m in metrics] == [1.0, 2.0, 3.0]
    assert metrics[0]["sync/canary_max_abs_diff"] == 0.0 and "sync/canary_max_abs_diff" not in metrics[1]
    assert metrics[2]["sync/canary_max_abs_diff"] == 0.0  # every 2 syncs, the first included
    assert all(m["timing_s/sync_check"] > 0 for m in metrics)


def _faulty_load(monkeypatch, fault):
    real = rollout_sync.load_bucket_in_place
    monkeypatch.setattr(rollout_sync, "load_bucket_in_place", lambda target, bucket: real(target, fault(bucket)))


def _tripping(actor, rollout, match: str) -> str:
    with pytest.raises(SyncAttestationError, match=match) as err:
        _run(actor, rollout, 3)
    line = str(err.value)
    assert "\n" not in line and "on_mismatch=warn" in line
    return line


def test_a_sync_that_skips_one_tensor_is_caught_naming_it(tiny_model_dir, monkeypatch):
    actor = _actor(tiny_model_dir)
    _faulty_load(monkeypatch, lambda bucket: ((n, t) for n, t in bucket if n != Q))
    line = _tripping(actor, _synced(actor), Q)
    assert "after sync 2" in line and line.count("(values") == 1  # the first sync found it still equal


def test_a_dtype_cast_on_the_way_is_caught(tiny_model_dir, monkeypatch):
    actor = _actor(tiny_model_dir)
    _faulty_load(monkeypatch, lambda bucket: ((n, t.to(torch.bfloat16)) for n, t in bucket))
    _tripping(actor, _synced(actor), r"model\.embed_tokens\.weight \(values")


def test_an_engine_perturbed_by_1e_3_is_caught_naming_the_tensor(tiny_model_dir, monkeypatch):
    actor = _actor(tiny_model_dir)
    rollout = _synced(actor)

    def perturb(bucket):
        for name, t in bucket:
            yield name, t + 1e-3 if name == Q else t

    _faulty_load(monkeypatch, perturb)
    _tripping(actor, rollout, Q + r" \(values")


def _stale_adapter(monkeypatch) -> None:
    """The fault: after the first (full) sync of each rollout, the adapter never moves again."""
    real = rollout_sync.load_bucket_in_place

    def load(target, bucket):
        first = not getattr(target, "_test_synced", False)
        target._test_synced = True
        return real(target, ((n, t) for n, t in bucket if first or "lora_" not in n))

    monkeypatch.setattr(rollout_sync, "load_bucket_in_place", load)


def test_a_stale_lora_adapter_is_caught_and_warn_mode_goes_on(tiny_model_dir, monkeypatch, caplog):
    actor = _actor(tiny_model_dir, lora_rank=4)
    _stale_adapter(monkeypatch)
    line = _tripping(actor, _synced(actor), "lora_A")
    assert "base_layer" not in line  # the frozen base weights match
    with caplog.at_level(logging.WARNING, logger="verl.workers.sync_attest"):
        metrics = _run(actor, _synced(actor, on_mismatch="warn"), 3)
    assert [m["sync/fingerprint_match"] for m in metrics] == [1.0, 0.0, 0.0]
    assert metrics[1]["sync/mismatched_tensors"] > 0
    assert sum("lora_B" in r.message for r in caplog.records) == 2


def test_a_stale_policy_version_is_a_mismatch():
    attestor = SyncAttestor(SyncCheckConfig(canary_every=0))
    with pytest.raises(SyncAttestationError, match="policy version 1 on the rollout, actor 2"):
        attestor.check({}, lambda _: {}, actor_version=2, rollout_version=1)


# ---------------------------------------------------------------- vLLM through its worker RPC
class _Runner:
    """The part of vLLM's model runner the worker extension uses, over a plain transformers copy."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        self.model, self.model_config = model, SimpleNamespace(dtype=dtype)
        params = dict(model.named_parameters(remove_duplicate=False))

        def load_weights(weights):
            names = set()
            for name, tensor in weights:
                params[name].data.copy_(tensor)
                names.add(name)
            return names

        model.load_weights = load_weights

    def get_model(self) -> torch.nn.Module:
        return self.model


@pytest.fixture
def fake_layerwise(monkeypatch):
    """vLLM's layer-wise reload hooks as no-ops (the stand-in model has nothing to repack)."""
    mod = types.ModuleType("vllm.model_executor.model_loader.reload.layerwise")
    mod.initialize_layerwise_reload = lambda model: None
    mod.finalize_layerwise_reload = lambda model, config: None
    for name in (
        "vllm",
        "vllm.model_executor",
        "vllm.model_executor.model_loader",
        "vllm.model_executor.model_loader.reload",
    ):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


class _VLLMEngine:
    """`VLLMRollout`'s attestation surface: ``streams_weights``, ``weights``, ``score``, ``config``."""

    streams_weights = True

    def __init__(self, actor_module: torch.nn.Module, dtype: torch.dtype, lora: bool) -> None:
        # vLLM's base model: checkpoint names, no peft wrappers
        model = copy.deepcopy(actor_module).merge_and_unload() if lora else copy.deepcopy(actor_module)
        self.model = model.to(dtype).requires_grad_(False)
        ext = VerlWorkerExtension()
        ext.model_runner = _Runner(self.model, dtype)
        self.weights = EngineWeightSync(lambda method, args: [getattr(ext, method)(*args)], lambda lora_id: None, lora)
        self.config = SimpleNamespace(dtype=str(dtype).removeprefix("torch."))

    def score(self, ids):
        return module_canary(self.model, ids)


def _vllm_run(actor, engine, steps: int, check: SyncCheckConfig | None = None) -> list[dict[str, float]]:
    from verl.workers.sync_attest_sides import default_canary_tolerance

    attestor = SyncAttestor(check or SyncCheckConfig(canary_every=1), default_canary_tolerance(engine))
    out = []
    for version in range(steps):
        engine.weights.update(actor.module)
        out.append(attest_engine(attestor, actor.module, engine, version, version))
        _train(actor)
    return out


def test_vllm_clean_syncs_match_in_bf16_and_fp32(tiny_model_dir, fake_layerwise):
    for dtype, tol in ((torch.bfloat16, 0.1), (torch.float32, 1e-3)):
        actor = _actor(tiny_model_dir)
        metrics = _vllm_run(actor, _VLLMEngine(actor.module, dtype, lora=False), 3)
        assert [m["sync/fingerprint_match"] for m in metrics] == [1.0, 1.0, 1.0]
        assert all(m["sync/canary_max_abs_diff"] <= tol for m in metrics)


def test_vllm_dtype_cast_on_the_way_is_caught(tiny_model_dir, fake_layerwise, monkeypatch):
    actor = _actor(tiny_model_dir)
    engine = _VLLMEngine(actor.module, torch.bfloat16, lora=False)
    real = weight_sync.full_tensor  # the gather every bucket is made with
    monkeypatch.setattr(weight_sync, "full_tensor", lambda t: real(t).to(torch.float16))
    with pytest.raises(SyncAttestationError, match=r"dtype torch\.float16 on the rollout, actor torch\.float32"):
        _vllm_run(actor, engine, 1)


def test_vllm_perturbed_engine_is_caught_by_the_canary(tiny_model_dir, fake_layerwise):
    from verl.workers.sync_attest_sides import default_canary_tolerance

    actor = _actor(tiny_model_dir)
    engine = _VLLMEngine(actor.module, torch.float32, lora=False)
    engine.weights.update(actor.module)
    with torch.no_grad():  # the engine's weights drift after the sync (what it received was right)
        for weight in engine.model.parameters():
            weight.add_(torch.randn_like(weight) * 1e-3)
    attestor = SyncAttestor(SyncCheckConfig(canary_every=1), default_canary_tolerance(engine))
    assert attestor.tolerance == 1e-3  # vLLM in float32
    with pytest.raises(SyncAttestationError, match=r"canary log-probs differ by 0\.0\d+ nats \(tolerance 0\.001\)"):
        attest_engine(attestor, actor.module, engine, 0, 0)


def test_vllm_stale_lora_adapter_is_caught_naming_it(tiny_model_dir, fake_layerwise, monkeypatch):
    actor = _actor(tiny_model_dir, lora_rank=4)
    engine = _VLLMEngine(actor.module, torch.bfloat16, lora=True)
    metrics = _vllm_run(actor, engine, 2)  # clean: the adapter file follows the actor
    assert [m["sync/fingerprint_match"] for m in metrics] == [1.0, 1.0]
    real = EngineWeightSync._write_adapter
    monkeypatch.setattr(
        EngineWeightSync, "_write_adapter", lambda self, state, cfg: None if self.lora_id else real(self, state, cfg)
    )
    actor = _actor(tiny_model_dir, lora_rank=4)
    engine = _VLLMEngine(actor.module, torch.bfloat16, lora=True)
    with pytest.raises(SyncAttestationError, match=r"lora:base_model\.model\..*lora_[AB]\.weight \(values"):
        _vllm_run(actor, engine, 3)
