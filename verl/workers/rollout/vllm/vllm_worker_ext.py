"""vLLM worker extension: in-place weight reload, called through ``collective_rpc``.

vLLM mixes this class into its worker (``worker_extension_cls``). Why not the model's own
``load_weights``: on the CPU backend, after loading, every linear layer's weight is repacked
into a oneDNN / sgl-kernel handle and the parameter is replaced by an empty one without a
``weight_loader``, so a second ``load_weights`` fails with "'Parameter' object has no attribute
'weight_loader'". vLLM's layer-wise reload (``vllm.model_executor.model_loader.reload``)
restores the checkpoint-format parameters with their loaders, loads, and re-runs each layer's
post-load processing (the repacking) once all of the layer's weights have arrived; it works on
CPU and GPU alike. One update is ``begin → load_bucket × k → finish``, so a fused layer whose
parts arrive in different buckets is processed only once, complete.

The same methods run in the caller's process (in-process engine: tensors are passed by
reference) or in vLLM's engine process, where a bucket arrives as a safetensors file in RAM
(``/dev/shm``): ``collective_rpc``'s msgpack does not carry a list of tensors.

Every tensor a bucket brings is fingerprinted on arrival (`verl.workers.sync_attest.fingerprint`,
its samples hashed in vLLM's model dtype, as ``load_weights`` casts them), before vLLM fuses
and repacks it; `verl_weight_fingerprint` returns the latest fingerprint of every name received,
for the weight-sync attestation.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["VerlWorkerExtension"]


class VerlWorkerExtension:
    """Methods added to vLLM's worker; ``self`` is the worker (``self.model_runner`` exists)."""

    def verl_begin_weight_update(self) -> None:
        """Put every layer into reload mode (checkpoint-format parameters with loaders)."""
        from vllm.model_executor.model_loader.reload.layerwise import initialize_layerwise_reload

        self._verl_loaded: set[str] = set()
        initialize_layerwise_reload(self.model_runner.get_model())

    def verl_load_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> int:
        """Load one bucket of ``(checkpoint name, tensor)``; returns how many parameters it set."""
        from verl.utils.weight_fingerprint import fingerprint

        received = self.__dict__.setdefault("_verl_fingerprints", {})
        dtype = self.model_runner.model_config.dtype
        for name, tensor in bucket:  # as received, before vLLM fuses and repacks the layers
            received[name] = fingerprint(tensor, dtype).to_wire()
        loaded = self.model_runner.get_model().load_weights(iter(bucket))
        self._verl_loaded |= set(loaded or ())
        return len(loaded or ())

    def verl_load_bucket_file(self, path: str) -> int:
        """Load one bucket saved as a safetensors file (engines in another process: a RAM file, no pickling)."""
        from safetensors.torch import load_file

        return self.verl_load_bucket(list(load_file(path).items()))

    def verl_finish_weight_update(self) -> list[str]:
        """Process (repack) the reloaded layers; returns the model parameters that got no weight."""
        from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload

        model = self.model_runner.get_model()
        finalize_layerwise_reload(model, self.model_runner.model_config)
        # with LoRA enabled vLLM wraps layers (``.base_layer.``); checkpoint names do not have it
        expected = {name.replace(".base_layer.", ".") for name, _ in model.named_parameters()}
        loaded = {name.replace(".base_layer.", ".") for name in self._verl_loaded}
        return sorted(expected - loaded)

    def verl_weight_fingerprint(self) -> dict[str, list[Any]]:
        """Latest fingerprint (`Fingerprint.to_wire`) of every checkpoint name received, by name."""
        return dict(self.__dict__.get("_verl_fingerprints", {}))

    def verl_model_info(self) -> dict[str, Any]:
        """Names and dtypes of the engine's parameters (diagnostics and tests)."""
        model = self.model_runner.get_model()
        return {name: str(p.dtype) for name, p in model.named_parameters()}
