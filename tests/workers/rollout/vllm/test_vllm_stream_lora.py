"""`EngineWeightSync.begin_stream` under LoRA (no vLLM needed: the engine is a recording stub).

The rollout on its own pool receives the actor's state-dict names in buckets; what reaches the
engine must be exactly what the colocated path sends: the base weights under checkpoint names
(`plan_checkpoint_buckets`) and the adapter in peft's save format (`lora_adapter_state`).
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from verl.workers.rollout.vllm.vllm_weights import (
    EngineWeightSync,
    lora_adapter_spec,
    lora_adapter_state,
)
from verl.workers.rollout.weight_sync import plan_checkpoint_buckets, plan_state_buckets, stream_names
from verl.workers.weight_stream import WeightStream


def _peft_lm() -> torch.nn.Module:
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
    return get_peft_model(
        AutoModelForCausalLM.from_config(cfg), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )


class _Engine:
    """Records the worker-extension calls; reports no unset parameter."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.loaded: dict[str, torch.Tensor] = {}
        self.removed: list[int] = []

    def rpc(self, method: str, args: tuple) -> list:
        self.calls.append(method)
        if method == "verl_load_bucket":
            self.loaded.update({k: v.clone() for k, v in args[0]})
        return [[]]


def _stream(sync: EngineWeightSync, lm: torch.nn.Module, trainable_only: bool) -> None:
    stream = WeightStream.start(lm, trainable_only, 4096)  # several buckets, adapter and base mixed
    sync.begin_stream()
    for _ in range(stream.buckets):
        sync.load_stream_bucket(stream.next(lm, keep=True))
    sync.finish_stream()


def _assert_adapter_is(sync: EngineWeightSync, lm: torch.nn.Module) -> None:
    state, config = lora_adapter_state(lm)
    written = load_file(os.path.join(sync.lora_dir, "adapter_model.safetensors"))
    assert sorted(written) == sorted(state)
    assert all(torch.equal(written[k], state[k]) for k in state)
    with open(os.path.join(sync.lora_dir, "adapter_config.json")) as f:
        assert json.load(f) == json.loads(json.dumps(config))


def test_stream_sends_the_base_once_then_only_the_adapter_as_the_colocated_path_does():
    lm, engine = _peft_lm(), _Engine()
    sync = EngineWeightSync(engine.rpc, engine.removed.append, lora=True)
    sync.adapter = lora_adapter_spec(lm)
    try:
        _stream(sync, lm, trainable_only=False)
        colocated = {k: v for bucket in plan_checkpoint_buckets(lm).iter(lm) for k, v in bucket}
        assert sorted(engine.loaded) == sorted(colocated) and all(
            torch.equal(engine.loaded[k], v) for k, v in colocated.items()
        )
        assert engine.calls[0] == "verl_begin_weight_update" and engine.calls[-1] == "verl_finish_weight_update"
        _assert_adapter_is(sync, lm)
        first_dir, n_adapter = sync.lora_dir, sum(1 for p in lm.parameters() if p.requires_grad)
        assert sync.lora_id == 1
        with torch.no_grad():  # an update moves only the adapter
            for p in lm.parameters():
                if p.requires_grad:
                    p.add_(torch.randn(p.shape))
        engine.calls.clear()
        _stream(sync, lm, trainable_only=True)
        assert engine.calls == []  # no base weight reached the engine
        assert sync.last_tensors == n_adapter == 8  # 2 layers x (q, v) x (A, B)
        assert sync.last_bytes == sum(p.numel() * p.element_size() for p in lm.parameters() if p.requires_grad)
        assert sync.lora_id == 2 and engine.removed == [1] and not os.path.exists(first_dir)
        _assert_adapter_is(sync, lm)
        _stream(sync, lm, trainable_only=False)  # after a checkpoint load: the base again, then the adapter
        assert engine.calls[0] == "verl_begin_weight_update" and sync.last_tensors == len(colocated) + n_adapter
        assert sync.lora_id == 3
        _assert_adapter_is(sync, lm)
    finally:
        sync.close()


def test_stream_refuses_an_adapter_only_first_update_and_a_partial_adapter():
    lm, engine = _peft_lm(), _Engine()
    sync = EngineWeightSync(engine.rpc, engine.removed.append, lora=True)
    sync.adapter = lora_adapter_spec(lm)
    try:
        with pytest.raises(
            RuntimeError, match="first weight update of a vLLM LoRA rollout must carry the base weights"
        ):
            _stream(sync, lm, trainable_only=True)
        _stream(sync, lm, trainable_only=False)
        first_three = plan_state_buckets(lm, stream_names(lm, True)[:3], 2**20)
        sync.begin_stream()
        sync.load_stream_bucket(first_three.gather(lm, 0))
        with pytest.raises(RuntimeError, match="carried 3 LoRA tensors, the adapter has 8"):
            sync.finish_stream()
    finally:
        sync.close()
