"""The ``vllm`` rollout engine: vLLM generates, colocated with the actor (verl's hybrid engine).

Built by ``build(module, config, tokenizer)`` (the ``vllm`` entry of ``ROLLOUT_ENGINES``).

* **Engine.** A `vllm.LLM` in the worker's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
  one-process executor) when the worker is alone; with several data-parallel ranks each rank
  owns an engine in a child process (vLLM initialises its own process group, which must not
  collide with FSDP's). The engine is started from the actor's *config* (written to a temporary
  directory; ``load_format=dummy``: random init, or ``auto``/``safetensors``: the actor's
  weights written there) and receives the actor's weights before its first generation.
* **Weights.** `update_weights` streams the actor's state in buckets (`vllm_weights`) into
  the worker extension (`vllm_worker_ext`), which reloads them in place — the path that works
  on the CPU backend — then resets the prefix cache (cached KV of the old weights is stale).
  LoRA: the base weights are sent once; after that only the adapter moves (a new
  ``LoRARequest`` from an in-memory-filesystem directory per update).
* **Sampling.** `resolve_sampling` (``temperature / top_k / top_p / do_sample``, ``val_kwargs``
  for validation, ``meta_info`` overrides) → vLLM ``SamplingParams``; greedy = temperature 0.
  Each row with ``sample_seeds`` gets its own seed, so its tokens do not depend on batching.
  Stop ids = the engine's EOS ids (as the ``hf`` engine's), unless ``rollout.ignore_eos``.
* **Log-probs.** ``logprobs_mode=processed_logprobs``: the log-prob of the sampled token under
  ``log_softmax(logits / τ)`` (τ = 1 for greedy), identical to the ``hf`` engine's definition when
  no top-k / top-p filter is active; with a filter, vLLM reports the filtered, renormalised
  distribution (the one it sampled from) — the difference shows in
  ``training/rollout_probs_diff_*`` and is what ``algorithm.rollout_correction`` corrects.
  ``calculate_log_probs=false`` skips them (no ``rollout_log_probs`` in the output).
* **free_cache_engine.** On devices whose vLLM supports sleep mode (CUDA), the engine sleeps
  (level 1: weights offloaded, KV cache freed) after each generation and wakes before the next
  weight update. vLLM's CPU worker has no sleep mode (its KV cache is the fixed
  ``VLLM_CPU_KVCACHE_SPACE`` allocation): there the key is a documented no-op.

Rollout keys → vLLM: ``tensor_model_parallel_size`` (1 on CPU), ``gpu_memory_utilization``
(on CPU: the share of RAM, unless ``VLLM_CPU_KVCACHE_SPACE`` sets the KV cache in GiB),
``enforce_eager``, ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_chunked_prefill``,
``enable_prefix_caching``, ``kv_cache_dtype``, ``load_format``, ``dtype``, ``seed``,
``max_model_len``, and ``engine_kwargs.vllm.*`` verbatim. ``rollout.n`` is applied by the
trainer (prompts arrive repeated); requests of one prompt share its KV through prefix caching.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from verl.protocol import DataProto
from verl.workers.rollout.hf_rollout import HFRollout, _as_id_list, default_eos_token_ids
from verl.workers.rollout.sampling import SamplingParams, resolve_sampling
from verl.workers.rollout.vllm_config import engine_args, engine_device
from verl.workers.rollout.vllm_weights import (
    DEFAULT_BUCKET_BYTES,
    hf_config_of,
    is_lora_model,
    iter_weight_buckets,
    lora_adapter_state,
)

__all__ = ["VLLMRollout", "build"]


def _scratch_dir(prefix: str) -> str:
    """A private directory in RAM when the machine has one (engine config, LoRA adapters)."""
    root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=root)


class VLLMRollout:
    """`RolloutEngine` on vLLM; see the module docstring.

    Args:
        module: the actor (plain, peft or FSDP2-sharded); only its config, dtype and (for
            ``load_format != dummy``) its weights are read here.
        config: the rollout section (`RolloutConfig`).
        tokenizer: the actor's tokenizer (eos / pad ids), or None.
        in_process: run the engine in this process (True when the worker is alone).
    """

    streams_weights = True  # `SyncedRollout` hands over the module itself, not a gathered state dict

    def __init__(self, module: nn.Module, config: Any, tokenizer: Any = None, *, in_process: bool = True) -> None:
        self.config = config
        self.lora = is_lora_model(module)
        self.eos_token_id = default_eos_token_ids(_gen_holder(module), tokenizer)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else self.eos_token_id[0])
        self.bucket_bytes = DEFAULT_BUCKET_BYTES
        self._lora_id = 0
        self._lora_dir: str | None = None
        self._model_dir = _scratch_dir("verl-vllm-model-")
        self.llm = self._start(module, in_process)
        self.sleeping = False
        self.last_update_s = 0.0
        self._base_synced = False

    # ------------------------------------------------------------------------------ engine
    def _start(self, module: nn.Module, in_process: bool) -> Any:
        args = engine_args(self.config, module, lora_rank=_lora_rank(module))
        load_format = args.pop("load_format")
        hf_config_of(module).save_pretrained(self._model_dir)
        if load_format != "dummy":
            _save_weights(module, self._model_dir)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        # vLLM pins OpenMP threads to cores by default; in-process that would pin the trainer too
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        threads = torch.get_num_threads()
        from vllm import LLM

        try:
            llm = LLM(
                model=self._model_dir, load_format=load_format, skip_tokenizer_init=True, generation_config="vllm",
                logprobs_mode="processed_logprobs",
                worker_extension_cls="verl.workers.rollout.vllm_worker_ext.VerlWorkerExtension", **args,
            )
        finally:
            torch.set_num_threads(threads)  # vLLM lowers the process's torch threads for serving
        self.sleep_supported = bool(self.config.free_cache_engine) and engine_device() != "cpu"
        return llm

    def close(self) -> None:
        """Shut the engine down and remove its scratch directories."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        for path in (self._model_dir, self._lora_dir):
            if path:
                shutil.rmtree(path, ignore_errors=True)

    def _wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def _sleep(self) -> None:
        if self.sleep_supported and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    # ------------------------------------------------------------------------------ weights
    def update_weights(self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module) -> None:
        """Load new weights into the engine (in place), then drop its prefix cache.

        Args:
            state_dict_or_model: the actor module (streamed in buckets; for LoRA only the
                adapter after the first call) or a full state dict with checkpoint names.

        Raises:
            RuntimeError: the engine has parameters the update did not cover.
        """
        start = time.perf_counter()
        self._wake()
        if isinstance(state_dict_or_model, nn.Module) and self.lora:
            if not self._base_synced:
                self._load_buckets(iter_weight_buckets(state_dict_or_model, self.bucket_bytes))
            self._load_adapter(state_dict_or_model)
        elif isinstance(state_dict_or_model, nn.Module):
            self._load_buckets(iter_weight_buckets(state_dict_or_model, self.bucket_bytes))
        else:
            self._load_buckets(iter([list(state_dict_or_model.items())]))
        self._base_synced = True
        self.llm.reset_prefix_cache()
        self.last_update_s = time.perf_counter() - start

    def _load_buckets(self, buckets: Any) -> None:
        self.llm.collective_rpc("verl_begin_weight_update")
        for bucket in buckets:
            self.llm.collective_rpc("verl_load_bucket", args=(bucket,))
        missing = self.llm.collective_rpc("verl_finish_weight_update")[0]
        if missing:
            raise RuntimeError(f"vLLM weight update left {len(missing)} engine parameters unset, e.g. {missing[:3]}")

    def _load_adapter(self, module: nn.Module) -> None:
        """Write the adapter to a fresh RAM directory and make it the active ``LoRARequest``."""
        import json

        from safetensors.torch import save_file

        state, adapter_config = lora_adapter_state(module)
        new_dir = _scratch_dir("verl-vllm-lora-")
        save_file(state, os.path.join(new_dir, "adapter_model.safetensors"))
        with open(os.path.join(new_dir, "adapter_config.json"), "w") as f:
            json.dump(adapter_config, f)
        if self._lora_id:
            self.llm.llm_engine.remove_lora(self._lora_id)
        if self._lora_dir:
            shutil.rmtree(self._lora_dir, ignore_errors=True)
        self._lora_id += 1
        self._lora_dir = new_dir

    def _lora_request(self) -> Any:
        if not self.lora or not self._lora_id:
            return None
        from vllm.lora.request import LoRARequest

        return LoRARequest(f"verl-actor-{self._lora_id}", self._lora_id, self._lora_dir)

    # ------------------------------------------------------------------------------ generation
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt; same inputs and outputs as `HFRollout.generate_sequences`.

        Raises:
            ValueError: no response length, right-padded or overlong prompts (as the hf engine).
            RuntimeError: generation before the first `update_weights`.
        """
        if not self._base_synced:
            raise RuntimeError("VLLMRollout.generate_sequences before update_weights: the engine has no actor weights yet")
        meta = prompts.meta_info
        params = resolve_sampling(self.config, meta)
        response_length = int(meta.get("response_length", self.config.response_length) or 0)
        if response_length < 1:
            raise ValueError(f"rollout response_length must be set and >= 1, got {response_length}")
        eos_ids = _as_id_list(meta.get("eos_token_id")) or self.eos_token_id
        pad_id = int(meta.get("pad_token_id", self.pad_token_id))
        batch = prompts.batch
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        HFRollout._check_lengths(self, attention_mask, response_length)  # the same input contract as hf
        seeds = _row_seeds(batch, meta, len(prompts))
        requests = [{"prompt_token_ids": ids[m.bool()].tolist()} for ids, m in zip(input_ids, attention_mask)]
        sampling = [self._sampling_params(params, response_length, eos_ids, s) for s in seeds]
        self._wake()
        outputs = self.llm.generate(requests, sampling, use_tqdm=False, lora_request=self._lora_request())
        self._sleep()
        responses, lengths, log_probs = _collect(outputs, response_length, pad_id)
        from verl.modules.forward import position_ids_from_attention_mask

        position_ids = batch["position_ids"] if "position_ids" in batch.keys() else position_ids_from_attention_mask(attention_mask)
        out_meta = {**meta, "temperature": params.logprob_temperature, "eos_token_id": eos_ids, "pad_token_id": pad_id}
        out = HFRollout._assemble(prompts, position_ids, responses, lengths, log_probs, out_meta)
        if not self.config.calculate_log_probs:
            out.batch.pop("rollout_log_probs")
        return out

    def _sampling_params(self, params: SamplingParams, max_tokens: int, eos_ids: list[int], seed: int | None) -> Any:
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=1, max_tokens=max_tokens, seed=seed, detokenize=False,
            temperature=0.0 if params.greedy else float(params.temperature),
            top_k=int(params.top_k) if params.top_k > 0 else 0, top_p=float(params.top_p),
            stop_token_ids=[] if self.config.ignore_eos else list(eos_ids), ignore_eos=bool(self.config.ignore_eos),
            logprobs=0 if self.config.calculate_log_probs else None,
        )


def _gen_holder(module: nn.Module) -> nn.Module:
    """The module whose ``generation_config`` lists the model's EOS ids (the base model under peft)."""
    return module.get_base_model() if is_lora_model(module) else module


def _lora_rank(module: nn.Module) -> int:
    if not is_lora_model(module):
        return 0
    return max(int(cfg.r) for cfg in module.peft_config.values())


def _save_weights(module: nn.Module, path: str) -> None:
    """``load_format`` auto/safetensors: the engine starts from the actor's current weights."""
    from safetensors.torch import save_file

    state: dict[str, torch.Tensor] = {}
    for bucket in iter_weight_buckets(module):
        state.update({k: v.contiguous() for k, v in bucket})
    hf_config = hf_config_of(module)
    if getattr(hf_config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # safetensors refuses shared storage; vLLM ties it again
    save_file(state, os.path.join(path, "model.safetensors"))


def _row_seeds(batch: Any, meta: Mapping[str, Any], n: int) -> list[int | None]:
    """Per-request seeds: ``sample_seeds`` rows, else ``meta_info["seed"] + row``, else the engine's RNG."""
    if "sample_seeds" in batch.keys():
        return [int(s) % (2**63) for s in batch["sample_seeds"].tolist()]
    if meta.get("seed") is not None:
        return [(int(meta["seed"]) + i) % (2**63) for i in range(n)]
    return [None] * n


def _collect(outputs: list[Any], response_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM outputs → responses `(B, R)` (pad after the end), lengths `(B,)`, log-probs `(B, R)` (0 after)."""
    b = len(outputs)
    responses = torch.full((b, response_length), pad_id, dtype=torch.long)
    log_probs = torch.zeros(b, response_length, dtype=torch.float32)
    lengths = torch.zeros(b, dtype=torch.long)
    for i, out in enumerate(outputs):
        completion = out.outputs[0]
        ids = list(completion.token_ids)[:response_length]
        lengths[i] = len(ids)
        if ids:
            responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        if completion.logprobs is not None:
            log_probs[i, : len(ids)] = torch.tensor([lp[t].logprob for lp, t in zip(completion.logprobs, ids)])
    return responses, lengths, log_probs


def build(module: nn.Module, config: Any, tokenizer: Any) -> VLLMRollout:
    """``ROLLOUT_ENGINES["vllm"]``: a `VLLMRollout`, in this process when the worker is alone."""
    import torch.distributed as dist

    alone = not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    return VLLMRollout(module, config, tokenizer, in_process=alone)
