"""`verl.workers.rollout.weight_sync`: the one bucketer (hand-checked cuts, the LoRA name mapping, and
the hf path and the vLLM path cutting one model into the same buckets)."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import AutoConfig, AutoModelForCausalLM

from verl.workers.rollout import weight_sync
from verl.workers.rollout.vllm.vllm_weights import EngineWeightSync
from verl.workers.rollout.weight_sync import (
    checkpoint_name,
    peft_save_name,
    plan_buckets,
    plan_checkpoint_buckets,
    plan_state_buckets,
    stream_names,
)
from verl.workers.weight_stream import WeightStream


# ------------------------------------------------------------------------------ the cutter, by hand
@pytest.mark.parametrize(
    ("sizes", "limit", "bounds"),
    [
        # 32 + 4000 > 1300 -> cut; 4000 > limit: alone; 40 + 1200 = 1240 <= 1300; 1240 + 120 = 1360 > 1300 -> cut
        ([32, 4000, 40, 1200, 120], 1300, [(0, 1), (1, 2), (2, 4), (4, 5)]),
        ([100, 200, 700, 1], 1000, [(0, 3), (3, 4)]),  # 100 + 200 + 700 = 1000 exactly fills a bucket; 1 opens the next
        ([5000, 10, 20], 100, [(0, 1), (1, 3)]),  # the first tensor is larger than the limit: its own bucket
        ([10, 5000, 10], 100, [(0, 1), (1, 2), (2, 3)]),  # a larger one in the middle closes the open bucket
        ([0, 0, 100, 0], 100, [(0, 4)]),  # empty tensors cost nothing
        ([7], 1, [(0, 1)]),
        ([], 1300, []),
    ],
)
def test_plan_buckets_cuts_where_hand_counted(sizes, limit, bounds):
    assert plan_buckets(sizes, limit) == bounds


def test_plan_buckets_refuses_a_limit_of_zero_and_a_negative_size():
    with pytest.raises(ValueError, match="bucket_bytes must be > 0, got 0"):
        plan_buckets([1], 0)
    with pytest.raises(ValueError, match="size must be >= 0 bytes, got -1 at position 1"):
        plan_buckets([1, -1], 10)


# ------------------------------------------------------------------------------ names
def _lm() -> torch.nn.Module:
    # fp32: embed/lm_head 64x32 = 8192 B (tied), q 32x32 = 4096 B, k/v 16x32 = 2048 B, o 4096 B,
    # gate/up/down 64x32 = 8192 B, norms 32 = 128 B
    cfg = AutoConfig.for_model(
        "llama",
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


def _peft(lm: torch.nn.Module) -> torch.nn.Module:
    return get_peft_model(lm, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def test_lora_names_map_to_the_checkpoint_names_vllm_loads():
    q = "model.layers.0.self_attn.q_proj"
    assert checkpoint_name(f"base_model.model.{q}.base_layer.weight", lora=True) == f"{q}.weight"
    assert checkpoint_name("base_model.model.model.norm.weight", lora=True) == "model.norm.weight"
    assert checkpoint_name(f"base_model.model.{q}.lora_A.default.weight", lora=True) is None
    assert checkpoint_name("base_model.model.lm_head.modules_to_save.default.weight", lora=True) is None
    assert checkpoint_name(f"{q}.weight", lora=False) == f"{q}.weight"
    assert (
        peft_save_name(f"base_model.model.{q}.lora_B.default.weight", "default")
        == f"base_model.model.{q}.lora_B.weight"
    )
    plain = _lm()
    plain_names = list(plain.state_dict())
    lm = _peft(copy.deepcopy(plain))
    # the peft model's base entries, mapped, are the plain checkpoint's names in the same order
    assert list(plan_checkpoint_buckets(lm).targets) == plain_names
    # the adapter entries, mapped, are peft's own save names
    adapter = [peft_save_name(n, "default") for n in stream_names(lm, trainable_only=True)]
    assert adapter == list(get_peft_model_state_dict(lm, adapter_name="default"))
    assert len(adapter) == 8  # 2 layers x (q, v) x (A, B)


# ------------------------------------------------------------------------------ one bucketer for both engines
class _Recorder:
    """`EngineWeightSync`'s vLLM side (``collective_rpc``), recording each bucket it receives."""

    def __init__(self) -> None:
        self.buckets: list[list[tuple[str, torch.Tensor]]] = []

    def rpc(self, method: str, args: tuple) -> list:
        if method == "verl_load_bucket":
            self.buckets.append(list(args[0]))
        return [[]]


def _vllm_buckets(module: torch.nn.Module, lora: bool, bucket_bytes: int) -> list[list[tuple[str, torch.Tensor]]]:
    """The buckets the colocated vLLM path (`EngineWeightSync.update`) sends for ``module``."""
    rec = _Recorder()
    sync = EngineWeightSync(rec.rpc, lambda lora_id: None, lora=lora, bucket_bytes=bucket_bytes)
    try:
        sync.update(module)
    finally:
        sync.close()
    assert sync.last_buckets == len(rec.buckets)
    return rec.buckets


def _hf_buckets(module: torch.nn.Module, bucket_bytes: int) -> list[list[tuple[str, torch.Tensor]]]:
    """The buckets the hf path (the actor's `WeightStream` to an hf `RolloutWorker`) sends for ``module``."""
    stream = WeightStream.start(module, trainable_only=False, bucket_bytes=bucket_bytes)
    return [stream.next(module, keep=True) for _ in range(stream.buckets)]


def _layout(buckets):
    return [[(name, t.numel() * t.element_size()) for name, t in bucket] for bucket in buckets]


def _assert_same(a, b):
    assert _layout(a) == _layout(b)  # same names, same order, same bytes, same cut
    assert all(torch.equal(x, y) for ba, bb in zip(a, b, strict=True) for (_, x), (_, y) in zip(ba, bb, strict=True))


@pytest.mark.parametrize("limit", [4096, 10_000, 2**30])
def test_hf_and_vllm_paths_cut_one_model_into_the_same_buckets(limit):
    lm = _lm()
    hf, vllm = _hf_buckets(lm, limit), _vllm_buckets(lm, lora=False, bucket_bytes=limit)
    _assert_same(hf, vllm)
    sizes = [sum(n for _, n in b) for b in _layout(hf)]
    assert all(s <= limit or len(b) == 1 for s, b in zip(sizes, hf, strict=True))  # over the limit only alone
    assert sum(sizes) == sum(t.numel() * t.element_size() for t in lm.state_dict().values())
    if limit == 4096:  # the 8192 B embedding (larger than the limit) is its own first bucket
        assert _layout(hf)[0] == [("model.embed_tokens.weight", 8192)]
        assert _layout(hf)[1] == [("model.layers.0.self_attn.q_proj.weight", 4096)]
        assert _layout(hf)[2] == [
            ("model.layers.0.self_attn.k_proj.weight", 2048),
            ("model.layers.0.self_attn.v_proj.weight", 2048),
        ]
    if limit == 2**30:
        assert len(hf) == 1


def test_vllm_path_of_a_lora_model_cuts_its_base_weights_as_the_hf_path_cuts_the_plain_model():
    lm = _peft(_lm())
    plain = copy.deepcopy(lm).unload()  # the same base weights without the adapter
    _assert_same(_vllm_buckets(lm, lora=True, bucket_bytes=4096), _hf_buckets(plain, 4096))


def test_a_plan_gathers_each_bucket_only_when_asked_and_other_ranks_keep_nothing(monkeypatch):
    lm = _lm()
    plan = plan_state_buckets(lm, stream_names(lm, trainable_only=False), 4096)
    gathered: list[int] = []
    real = weight_sync.full_tensor
    monkeypatch.setattr(weight_sync, "full_tensor", lambda t: gathered.append(1) or real(t))
    buckets = plan.iter(lm)
    first = next(buckets)
    assert len(gathered) == len(first) == 1  # bucket 0 alone was gathered
    assert plan.gather(lm, 1, keep=False) == [] and len(gathered) == 2  # joins the gather, keeps nothing
    assert plan.bucket_sizes()[:3] == [8192, 4096, 4096] and plan.total_bytes == sum(plan.sizes)
    with pytest.raises(IndexError, match=f"bucket {len(plan)} of a {len(plan)}-bucket plan"):
        plan.gather(lm, len(plan))
