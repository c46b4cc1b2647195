"""Weight streaming from the actor to a vLLM engine: buckets of full tensors, or the LoRA adapter.

The actor may be a plain transformers model, a peft (LoRA) model, or FSDP2-sharded (its
parameters are `DTensor`s). A full-state update is the bucketer every engine shares
(`verl.workers.rollout.weight_sync.plan_checkpoint_buckets`): the state dict in its fixed order,
cut into buckets of at most ``bucket_bytes`` from the global sizes, each bucket's whole tensors
gathered one at a time (``DTensor.full_tensor()``, a collective every rank enters in the same
order) only when the engine asks for it, handed to the engine and dropped before the next one is
gathered, so a rank never holds a second whole unsharded copy of the model — at most one bucket
(plus one tensor larger than a bucket).

Names are Hugging Face checkpoint names (``model.layers.0.self_attn.q_proj.weight``): vLLM's
``load_weights`` maps them onto its fused layers (``qkv_proj``, ``gate_up_proj``). For a peft
model the base weights are unwrapped (`weight_sync.checkpoint_name`: ``base_model.model.`` prefix
and ``.base_layer`` removed) and the adapter tensors are skipped; `lora_adapter_state` returns the
adapter alone in peft's own save format, which is all that moves after a LoRA update.

A rollout worker on its own pool (``hybrid_engine=false``) receives the actor's tensors under
their state-dict names instead (`EngineWeightSync.begin_stream`): under LoRA the base entries
are renamed as above and go to vLLM, the adapter entries are renamed to peft's save naming
(`weight_sync.peft_save_name`: the adapter name dropped, as ``get_peft_model_state_dict`` does)
and become the next ``LoRARequest`` — the colocated adapter path, fed from buckets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from verl.workers.rollout.weight_sync import (
    DEFAULT_BUCKET_BYTES,
    Bucket,
    checkpoint_name,
    full_tensor,
    is_lora_model,
    peft_save_name,
    plan_checkpoint_buckets,
)

__all__ = ["EngineWeightSync", "hf_config_of", "lora_adapter_spec", "lora_adapter_state"]


def hf_config_of(module: nn.Module) -> Any:
    """The transformers config of the (possibly peft-wrapped) causal LM."""
    base = module.get_base_model() if is_lora_model(module) else module
    return base.config


def lora_adapter_spec(module: nn.Module) -> tuple[str, dict[str, Any]]:
    """The active LoRA adapter's name and ``adapter_config`` (a JSON-able dict).

    Raises:
        ValueError: ``module`` is not a peft model.
    """
    if not is_lora_model(module):
        raise ValueError("lora_adapter_spec needs a peft (LoRA) model")
    name = module.active_adapter if isinstance(module.active_adapter, str) else module.active_adapter[0]
    config = module.peft_config[name].to_dict()
    config["target_modules"] = (
        sorted(config["target_modules"])
        if isinstance(config.get("target_modules"), set)
        else config.get("target_modules")
    )
    return name, config


def lora_adapter_state(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The active LoRA adapter: (tensors in peft's save naming, ``adapter_config`` as a dict).

    Raises:
        ValueError: ``module`` is not a peft model.
    """
    from peft import get_peft_model_state_dict

    name, config = lora_adapter_spec(module)
    state = {
        k: full_tensor(v).detach().to("cpu").contiguous()
        for k, v in get_peft_model_state_dict(module, adapter_name=name).items()
    }
    return state, config


class EngineWeightSync:
    """Pushes the actor's weights (or only its LoRA adapter) into one vLLM engine.

    The engine is reached through two callables, so the same code serves the in-process `LLM`
    and the `AsyncLLM` in its own process:

    Args:
        rpc: ``rpc(method, args) -> list`` = the engine's ``collective_rpc``.
        remove_lora: ``remove_lora(lora_id)`` of the engine.
        lora: the actor is a peft model: base weights once, then only the adapter.
        bucket_bytes: bucket size of full-state streaming.
        via_files: the engine is in another process: each bucket goes through a safetensors
            file in RAM instead of the call's arguments.

    Attributes:
        synced: the engine holds actor weights (after the first `update`).
        last_bytes / last_tensors / last_buckets: what the last `update` moved into the engine
            (``last_buckets`` counts full-state buckets; a LoRA adapter is not one).
    """

    def __init__(
        self, rpc: Any, remove_lora: Any, lora: bool, bucket_bytes: int = DEFAULT_BUCKET_BYTES, via_files: bool = False
    ) -> None:
        self.rpc, self.remove_lora, self.lora, self.bucket_bytes = rpc, remove_lora, lora, bucket_bytes
        self.via_files = via_files
        self.synced = False
        self.last_bytes = self.last_tensors = self.last_buckets = 0
        self.lora_id = 0
        self.lora_dir: str | None = None
        self.adapter: tuple[str, dict[str, Any]] | None = None  # `lora_adapter_spec`, for `begin_stream`
        self._stream_base = False
        self._stream_adapter: dict[str, torch.Tensor] = {}
        self._adapter_keys: set[str] = set()

    def update(self, state_dict_or_model: Any) -> None:
        """Stream a module (buckets; LoRA: adapter only after the first call) or a full state dict.

        Raises:
            RuntimeError: the engine has parameters the update did not cover.
        """
        self.last_bytes = self.last_tensors = self.last_buckets = 0
        if not isinstance(state_dict_or_model, nn.Module):
            self._load_buckets(iter([list(state_dict_or_model.items())]))
        elif not self.lora or not self.synced:
            self._load_buckets(
                plan_checkpoint_buckets(state_dict_or_model, self.bucket_bytes).iter(state_dict_or_model)
            )
        if self.lora and isinstance(state_dict_or_model, nn.Module):
            self._load_adapter(state_dict_or_model)
        self.synced = True

    def _load_buckets(self, buckets: Iterator[Bucket]) -> None:
        self.begin()
        for bucket in buckets:
            self.load_bucket(bucket)
            del bucket  # dropped before the next bucket is gathered: one bucket alive at a time
        self.finish()

    def begin(self) -> None:
        """Start a full-state update fed bucket by bucket (`load_bucket`, then `finish`)."""
        self.last_bytes = self.last_tensors = self.last_buckets = 0
        self.rpc("verl_begin_weight_update", ())

    def load_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        """Load one bucket of ``(checkpoint name, full tensor)`` into the engine."""
        if self.via_files:
            self._load_bucket_file(bucket)
        else:
            self.rpc("verl_load_bucket", (bucket,))
        self.last_tensors += len(bucket)
        self.last_buckets += 1
        self.last_bytes += sum(t.numel() * t.element_size() for _, t in bucket)

    def finish(self) -> None:
        """End the update: the engine processes (repacks) the reloaded layers.

        Raises:
            RuntimeError: the engine has parameters the update did not cover.
        """
        missing = self.rpc("verl_finish_weight_update", ())[0]
        if missing:
            raise RuntimeError(f"vLLM weight update left {len(missing)} engine parameters unset, e.g. {missing[:3]}")
        self.synced = True

    # the actor's state-dict names, bucket by bucket (a rollout worker on its own pool)
    def begin_stream(self) -> None:
        """Start an update whose buckets carry the actor's own state-dict names (`load_stream_bucket`)."""
        self._stream_base, self._stream_adapter = not self.lora, {}
        if self.lora:  # base weights may or may not come: `load_stream_bucket` begins on the first
            self.last_bytes = self.last_tensors = self.last_buckets = 0
        else:
            self.begin()

    def load_stream_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        """Load one bucket: base weights into vLLM; LoRA adapter tensors kept for `finish_stream`.

        Args:
            bucket: ``[(actor state-dict name, full tensor), ...]`` (`verl.workers.weight_stream.WeightStream.next`).

        Raises:
            ValueError: a trainable non-LoRA entry of a peft model (``modules_to_save``).
            RuntimeError: LoRA without ``adapter`` set (`lora_adapter_spec` of the actor).
        """
        if not self.lora:
            self.load_bucket(bucket)
            return
        if self.adapter is None:
            raise RuntimeError("EngineWeightSync.adapter (lora_adapter_spec of the actor) is unset")
        base: list[tuple[str, torch.Tensor]] = []
        for name, tensor in bucket:
            target = checkpoint_name(name, lora=True)
            if target is not None:
                base.append((target, tensor))
            elif "lora_" in name:
                self._stream_adapter[peft_save_name(name, self.adapter[0])] = tensor.detach().to("cpu").contiguous()
            else:
                raise ValueError(
                    f"{name!r} is not supported yet on a vLLM rollout with LoRA: train only the LoRA adapter "
                    "(no modules_to_save)"
                )
        if base:
            if not self._stream_base:
                self.begin()
                self._stream_base = True
            self.load_bucket(base)

    def finish_stream(self) -> None:
        """End the update: repack reloaded layers (if base weights came), then load the adapter.

        Raises:
            RuntimeError: the engine has parameters the update did not cover; the first update
                carried no base weights; the adapter's tensors differ from the first update's.
        """
        if self._stream_base:
            self.finish()
        if not self.lora:
            return
        if not self.synced:
            raise RuntimeError(
                "the first weight update of a vLLM LoRA rollout must carry the base weights (a full sync)"
            )
        keys = set(self._stream_adapter)
        if self._adapter_keys and keys != self._adapter_keys:
            raise RuntimeError(
                f"weight update carried {len(keys)} LoRA tensors, the adapter has {len(self._adapter_keys)}"
            )
        self._adapter_keys = keys
        self._write_adapter(self._stream_adapter, self.adapter[1])
        self._stream_adapter = {}

    def _load_bucket_file(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        import os
        import tempfile

        from safetensors.torch import save_file

        fd, path = tempfile.mkstemp(suffix=".safetensors", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(fd)
        try:
            save_file({k: v.clone() for k, v in bucket}, path)  # clone: tied weights share storage
            self.rpc("verl_load_bucket_file", (path,))
        finally:
            os.unlink(path)

    def _load_adapter(self, module: nn.Module) -> None:
        self._write_adapter(*lora_adapter_state(module))

    def _write_adapter(self, state: dict[str, torch.Tensor], adapter_config: dict[str, Any]) -> None:
        """Write the adapter to a fresh in-memory directory; it becomes the active ``LoRARequest``."""
        import json
        import os
        import shutil
        import tempfile

        from safetensors.torch import save_file

        new_dir = tempfile.mkdtemp(prefix="verl-vllm-lora-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        save_file(state, os.path.join(new_dir, "adapter_model.safetensors"))
        with open(os.path.join(new_dir, "adapter_config.json"), "w") as f:
            json.dump(adapter_config, f)
        if self.lora_id:
            self.remove_lora(self.lora_id)
        if self.lora_dir:
            shutil.rmtree(self.lora_dir, ignore_errors=True)
        self.lora_id += 1
        self.lora_dir = new_dir
        self.last_tensors += len(state)
        self.last_bytes += sum(t.numel() * t.element_size() for t in state.values())

    def fingerprint(self) -> dict[str, Any]:
        """The engine's side of a weight-sync attestation (`verl.workers.sync_attest`).

        What vLLM's worker received, by checkpoint name (`VerlWorkerExtension.verl_weight_fingerprint`,
        first worker), plus, under LoRA, the tensors of the adapter file the next request loads,
        as ``lora:<peft save name>``.

        Returns:
            ``{name: Fingerprint}``.
        """
        from verl.utils.weight_fingerprint import Fingerprint, adapter_fingerprints

        out = {name: Fingerprint.from_wire(w) for name, w in self.rpc("verl_weight_fingerprint", ())[0].items()}
        if self.lora and self.lora_dir:
            import os

            from safetensors.torch import load_file

            out.update(adapter_fingerprints(load_file(os.path.join(self.lora_dir, "adapter_model.safetensors"))))
        return out

    def lora_request(self) -> Any:
        """The ``LoRARequest`` of the current adapter, or None without LoRA."""
        if not self.lora or not self.lora_id:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest(f"verl-actor-{self.lora_id}", self.lora_id, self.lora_dir)

    def close(self) -> None:
        """Remove the adapter directory."""
        import shutil

        if self.lora_dir:
            shutil.rmtree(self.lora_dir, ignore_errors=True)
