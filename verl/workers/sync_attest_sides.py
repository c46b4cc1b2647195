"""The two sides of a weight-sync attestation (`verl.workers.sync_attest`) for each engine kind.

* ``hf`` engine (it generates with its own transformers module, refreshed in place): the
  rollout's fingerprints are those of the module's own tensors, every parameter and buffer name
  (tied aliases included), hashed in their storage dtype; the actor's are its state-dict
  entries under the same names. The canary is an fp32 forward of each module.
* vLLM (``streams_weights``): the engine's layers are fused and, on CPU, repacked, so its
  fingerprints are of the tensors its worker *received* (`VerlWorkerExtension.verl_load_bucket`,
  after the transport, in the engine's process), hashed in vLLM's model dtype, plus the LoRA
  adapter file the next request will load (names ``lora:<peft save name>``); the actor's are
  its state under the checkpoint names the sync sends (peft wrappers removed) and its adapter.
  The canary is vLLM's prompt log-probs (`VLLMRollout.score`) against the actor's forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from verl.utils.weight_fingerprint import (
    LORA_PREFIX,
    Fingerprint,
    adapter_fingerprints,
    fingerprint_named,
)
from verl.workers.rollout.weight_sync import checkpoint_name, full_tensor, is_lora_model
from verl.workers.sync_attest import (
    SyncAttestor,
    canary_ids,
    expected_fingerprints,
    module_canary,
    module_tensors,
)

__all__ = [
    "actor_expected",
    "adapter_fingerprints",
    "attest_engine",
    "default_canary_tolerance",
    "engine_canary",
    "engine_fingerprints",
    "module_fingerprints",
    "vllm_items",
]


def module_fingerprints(module: nn.Module) -> dict[str, Fingerprint]:
    """Fingerprints of every parameter and buffer of an unsharded module, under every name it has.

    A tensor-parallel rollout copy (``DTensor`` slices) is fingerprinted on its whole tensors, one
    gathered at a time (a collective every rank of the group enters in the same order)."""
    items = dict(module.named_parameters(remove_duplicate=False))
    items.update(module.named_buffers(remove_duplicate=False))
    return {name: fingerprint_named([(name, full_tensor(t))])[name] for name, t in items.items()}


def vllm_items(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The actor's tensors under the names a vLLM engine receives them (module docstring)."""
    from verl.workers.rollout.vllm.vllm_weights import lora_adapter_state

    lora = is_lora_model(module)
    for name, tensor in module_tensors(module):
        target = checkpoint_name(name, lora)
        if target is not None:
            yield target, tensor
    if lora:
        state, _ = lora_adapter_state(module)
        for name, tensor in state.items():
            yield LORA_PREFIX + name, tensor


def streams_weights(engine: Any) -> bool:
    """Whether ``engine`` holds its own weights (vLLM) rather than a transformers module."""
    return bool(getattr(engine, "streams_weights", False))


def default_canary_tolerance(engine: Any) -> float:
    """Canary tolerance (nats) when ``sync_check.canary_tolerance`` is None: 1e-4 for an hf engine
    (the same forward code on the same weights), 1e-3 for vLLM in float32, 0.1 for vLLM in a
    16-bit dtype (its own kernels and rounding); vLLM's dtype is ``rollout.dtype``, else the model's."""
    if not streams_weights(engine):
        return 1e-4
    dtype = getattr(getattr(engine, "config", None), "dtype", None)
    if dtype is None:
        module = getattr(engine, "module", None)
        param = next(module.parameters(), None) if isinstance(module, nn.Module) else None
        dtype = str(param.dtype) if param is not None else "float32"
    return 1e-3 if str(dtype).removeprefix("torch.") in ("float32", "fp32") else 0.1


def engine_fingerprints(engine: Any) -> dict[str, Fingerprint]:
    """The rollout side: an hf engine's module tensors, or what vLLM's worker received.

    Raises:
        TypeError: an engine with neither a module nor vLLM's weight sync.
    """
    if streams_weights(engine):
        return engine.weights.fingerprint()
    module = getattr(engine, "module", None)
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"sync_check: cannot read the weights of a {type(engine).__name__} rollout engine; "
            "set actor_rollout_ref.rollout.sync_check.enable=false"
        )
    return module_fingerprints(module)


def actor_expected(module: nn.Module, actual: Mapping[str, Fingerprint], vllm_names: bool) -> dict[str, Fingerprint]:
    """The actor side, hashed in the rollout's digest dtypes (`expected_fingerprints`); a collective
    when the actor is FSDP2-sharded (its shards' samples are exchanged in one object all-gather)."""
    items = vllm_items(module) if vllm_names else module_tensors(module)
    return expected_fingerprints(items, actual)


def engine_canary(engine: Any, ids: list[int]) -> torch.Tensor:
    """The engine's canary log-probs `(len(ids) - 1,)`: vLLM's ``score``, else its module's forward."""
    if streams_weights(engine):
        return engine.score(ids).float()
    return module_canary(engine.module, ids)


def vocab_size(module: nn.Module) -> int:
    """Vocabulary size of a (possibly peft-wrapped) causal LM: the output embedding's rows."""
    head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
    return int(head.weight.shape[0]) if head is not None else int(module.config.vocab_size)


def attest_engine(
    attestor: SyncAttestor, actor_module: nn.Module, engine: Any, actor_version: int, rollout_version: int
) -> dict[str, float]:
    """One colocated check: ``engine`` (hf or vLLM, in this process) against ``actor_module``.

    A collective when the actor is sharded: every rank calls it after the same sync.

    Raises:
        SyncAttestationError: see `SyncAttestor.check`.
    """
    vllm = streams_weights(engine)
    ids = canary_ids(vocab_size(actor_module))
    with attestor.timed():
        return attestor.check(
            engine_fingerprints(engine),
            lambda actual: actor_expected(actor_module, actual, vllm),
            actor_version,
            rollout_version,
            lambda: (module_canary(actor_module, ids), engine_canary(engine, ids)),
        )
