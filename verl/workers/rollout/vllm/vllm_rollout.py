"""The ``vllm`` rollout engine: vLLM generates, colocated with the actor (verl's hybrid engine).

Built by ``build(module, config, tokenizer)`` (the ``vllm`` entry of ``ROLLOUT_ENGINES``).

* **Engine.** A `vllm.LLM` in the worker's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
  one-process executor) when the worker is alone; with several data-parallel ranks each rank
  owns an engine in a child process (vLLM initialises its own process group, which must not
  collide with FSDP's). The engine is started from the actor's *config* (written to a temporary
  directory; ``load_format=dummy``: random init, or ``auto``/``safetensors``: the actor's
  weights written there) and receives the actor's weights before its first generation.
* **Agent loops (async server mode).** When the rollout section asks for agent loops
  (``multi_turn.enable``, ``mode=async``, ``over_sample_rate > 0`` or another default agent
  loop: `serves_agent_loops`), the worker's one engine is vLLM's async engine
  (`verl.workers.rollout.vllm.vllm_async.VLLMAsyncTokenEngine`, engine core in a child process): the
  agent loops' concurrent `TokenRequest`s go to it through `token_engine` and are batched
  continuously, and single-turn batches (``generate_sequences``, ``score``) are submitted to
  the same engine all at once — never a second engine in the worker. Decision: without agent
  loops the offline `vllm.LLM` stays, because in process it receives the weight buckets by
  reference, where the async engine's child process needs a copy through ``/dev/shm`` per
  bucket (about 2x the sync time on CPU: `benchmarks/vllm_async_cpu.md`); tokens are the same either way
  (per-row seeds). Rows that name another agent loop on an engine built without agent loops
  get a one-line error saying which key to set.
* **Weights.** `update_weights` streams the actor's state in buckets (`vllm_weights`) into
  the worker extension (`vllm_worker_ext`), which reloads them in place — the path that works
  on the CPU backend — then resets the prefix cache (cached KV of the old weights is stale).
  An in-process engine receives the tensors themselves; an engine in a child process receives
  each bucket as a safetensors file in ``/dev/shm``. vLLM's parallel state is per process, so
  one in-process engine may live in a process at a time (a second one is refused).
  LoRA: the base weights are sent once; after that only the adapter moves (a new
  ``LoRARequest`` from an in-memory-filesystem directory per update).
* **Sampling.** `resolve_sampling` (``temperature / top_k / top_p / do_sample``, ``val_kwargs``
  for validation, ``meta_info`` overrides) → vLLM ``SamplingParams``; greedy = temperature 0.
  Each row gets its own seed (`verl.workers.rollout.layout.row_seeds`: ``sample_seeds``, else derived
  from ``meta_info["seed"]``, the rule of the ``hf`` engine and the agent loops), so its tokens do not
  depend on batching.
  Stop ids = the engine's EOS ids (as the ``hf`` engine's), unless ``rollout.ignore_eos``.
* **Log-probs.** ``logprobs_mode=processed_logprobs``: the log-prob of the sampled token under
  ``log_softmax(logits / τ)`` (τ = 1 for greedy), identical to the ``hf`` engine's definition when
  no top-k / top-p filter is active; with a filter, vLLM reports the filtered, renormalised
  distribution (the one it sampled from) — the difference shows in
  ``training/rollout_probs_diff_*`` and is what ``algorithm.rollout_correction`` corrects.
  ``calculate_log_probs=false`` skips them (no ``rollout_log_probs`` in the output).
* **free_cache_engine.** On devices whose vLLM supports sleep mode (CUDA), the engine sleeps
  (level 1: weights offloaded, KV cache freed) after each generation (agent loops: after the
  batch's last trajectory, `sleep` is called by the agent-loop manager) and wakes before the
  next weight update or generation. vLLM's CPU worker has no sleep mode (its KV cache is the fixed
  ``VLLM_CPU_KVCACHE_SPACE`` allocation): there the key is a documented no-op.

Rollout keys → vLLM: ``tensor_model_parallel_size`` (1 on CPU), ``gpu_memory_utilization``
(on CPU: the share of RAM, unless ``VLLM_CPU_KVCACHE_SPACE`` sets the KV cache in GiB),
``enforce_eager``, ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_chunked_prefill``,
``enable_prefix_caching``, ``load_format``, ``dtype``, ``seed``, (``kv_cache_dtype`` via engine_kwargs.vllm),
``max_model_len``, and ``engine_kwargs.vllm.*`` verbatim. ``rollout.n`` is applied by the
trainer (prompts arrive repeated); requests of one prompt share its KV through prefix caching.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from verl.protocol import DataProto
from verl.workers.rollout import layout
from verl.workers.rollout.layout import derive_seeds
from verl.workers.rollout.partial import merge_continuation, split_continuation
from verl.workers.rollout.sampling import resolve_sampling
from verl.workers.rollout.stop_strings import StopStrings, stop_strings_of
from verl.workers.rollout.vllm.vllm_config import (
    engine_device,
    eos_and_pad,
    lora_rank_of,
    prepare_engine,
    restore_process_state,
    vllm_sampling_params,
)
from verl.workers.rollout.vllm.vllm_weights import EngineWeightSync, lora_adapter_spec
from verl.workers.rollout.weight_sync import bucket_bytes_of, is_lora_model

__all__ = ["VLLMRollout", "build", "eos_and_pad", "lora_rank_of", "restore_process_state", "serves_agent_loops"]


class _OfflineLLM:
    """`vllm.LLM` behind the calls `VLLMRollout` makes (the same ones `VLLMAsyncTokenEngine` answers).

    Args:
        module: the actor (config, dtype, first weights for ``load_format`` auto / safetensors).
        config: the rollout section.
        in_process: engine core in this process (one-process executor) or in a child process.
    """

    _in_process_alive = False  # vLLM's parallel state is per process: one in-process engine at a time

    def __init__(self, module: nn.Module, config: Any, in_process: bool, tokenizer: Any = None) -> None:
        if in_process and _OfflineLLM._in_process_alive:
            raise RuntimeError(
                "an in-process vLLM engine already runs in this process (vLLM's parallel state is "
                "global): close() it first, or build this one with in_process=False"
            )
        self.in_process = in_process
        args, self._model_dir = prepare_engine(config, module, lora_rank_of(module), tokenizer)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        # vLLM pins OpenMP threads to cores by default; in-process that would pin the trainer too
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        from vllm import LLM, envs

        # vLLM caches its environment once an engine has started: without this, an engine built after
        # an in-process one would also run in process (and share, then tear down, its parallel state)
        getattr(envs, "disable_envs_cache", lambda: None)()
        with restore_process_state():  # vLLM lowers torch's threads and an in-process one re-seeds the RNGs
            self.llm = LLM(**args)
        _OfflineLLM._in_process_alive |= in_process
        self.weights = EngineWeightSync(
            lambda method, rpc_args: self.llm.collective_rpc(method, args=rpc_args),
            self.llm.llm_engine.remove_lora,
            lora=is_lora_model(module),
            via_files=not in_process,
            bucket_bytes=bucket_bytes_of(config),
        )

    def update_weights(self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module) -> None:
        self.weights.update(state_dict_or_model)
        self.llm.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def run_batch(self, prompts: list[list[int]], params: list[Any], lora_request: Any = None) -> list[Any]:
        return self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts],
            params,
            use_tqdm=False,
            lora_request=lora_request or self.weights.lora_request(),
        )

    def sleep(self, level: int = 1) -> None:
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        self.weights.close()
        # the weight sync holds a bound method of the engine: drop it, or the engine's finalizer
        # runs at some later collection and tears down the parallel state of whatever in-process
        # engine lives then ("pipeline model parallel group is not initialized")
        self.weights.rpc = self.weights.remove_lora = None
        if llm is not None and self.in_process:
            llm.llm_engine.engine_core.shutdown()
            _OfflineLLM._in_process_alive = False
        elif llm is not None:
            # dropping the last reference runs vLLM's finalizer, which stops the child process
            del llm
            gc.collect()
        shutil.rmtree(self._model_dir, ignore_errors=True)


class VLLMRollout:
    """`RolloutEngine` on vLLM; see the module docstring.

    Args:
        module: the actor (plain, peft or FSDP2-sharded); its config, dtype and (for
            ``load_format != dummy``) its weights are read here.
        config: the rollout section (`RolloutConfig`).
        tokenizer: the actor's tokenizer (eos / pad ids), or None.
        in_process: run the offline engine in this process (True when the worker is alone).
        serve_async: the engine is vLLM's async engine (`VLLMAsyncTokenEngine`, its core in a
            child process), which also serves agent loops (`token_engine`); ``in_process`` is
            then unused.
    """

    streams_weights = True  # `SyncedRollout` hands over the module itself, not a gathered state dict

    def __init__(
        self,
        module: nn.Module,
        config: Any,
        tokenizer: Any = None,
        *,
        in_process: bool = True,
        serve_async: bool = False,
    ) -> None:
        self.config, self.serve_async = config, serve_async
        self.eos_token_id, self.pad_token_id = eos_and_pad(module, tokenizer)
        if serve_async:
            from verl.workers.rollout.vllm.vllm_async import VLLMAsyncTokenEngine

            self.backend: Any = VLLMAsyncTokenEngine(module, config, tokenizer)
        else:
            self.backend = _OfflineLLM(module, config, in_process, tokenizer)
        self.stop_strings = stop_strings_of(config, tokenizer)
        self.in_process = not serve_async and in_process
        self.weights = self.backend.weights
        self.weights.adapter = lora_adapter_spec(module) if is_lora_model(module) else None
        self.sleep_supported = bool(config.free_cache_engine) and engine_device() != "cpu"
        self.sleeping = False
        self.last_update_s = 0.0
        self.policy_version = 0  # tags the sampled tokens (rollout_policy_versions)
        self._generation: Any = contextlib.nullcontext() if serve_async else threading.Lock()
        self._paused = False

    # partial rollouts (verl.workers.rollout.partial): the async engine aborts its requests at a
    # pause and resubmits each one's prompt + tokens so far at resume; the offline engine cannot
    # stop a call, so a pause there waits for the call in progress to end
    def pause(self, timeout: float | None = None) -> None:
        """Stop generation for a weight update (see the comment above).

        Raises:
            TimeoutError: the offline engine's call in progress did not end within ``timeout``.
        """
        if self.serve_async:
            self.backend.pause()
        elif not self._paused:
            if not self._generation.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError(f"the vLLM generation call did not end within {timeout} s")
            self._paused = True

    def resume(self) -> None:
        """Let generation go on (the async engine resubmits the aborted requests' prefixes)."""
        if self.serve_async:
            self.backend.resume()
        elif self._paused:
            self._paused = False
            self._generation.release()

    def interrupt(self) -> None:
        """Make calls in flight return now, unfinished rows flagged (``rollout_finished`` False).

        Raises:
            ValueError: the offline engine (``rollout.mode=sync`` without agent loops).
        """
        if not self.serve_async:
            raise ValueError(
                "interrupting a vLLM generation is not supported yet on the offline engine: "
                "set actor_rollout_ref.rollout.mode=async (vLLM's async engine)"
            )
        self.backend.interrupt()

    def clear_interrupt(self) -> None:
        """Allow generation again after `interrupt`."""
        if self.serve_async:
            self.backend.clear_interrupt()

    def set_policy_version(self, version: int) -> None:
        """The version of the weights now loaded (tags the tokens sampled from now on)."""
        self.policy_version = int(version)
        if self.serve_async:
            self.backend.policy_version = self.policy_version

    @property
    def llm(self) -> Any:
        """The offline `vllm.LLM` (None when serving agent loops with the async engine)."""
        return getattr(self.backend, "llm", None)

    @property
    def returns_log_probs(self) -> bool:
        """Whether outputs carry ``rollout_log_probs`` (``rollout.calculate_log_probs``)."""
        return bool(self.config.calculate_log_probs)

    def token_engine(self) -> Any:
        """The `AsyncTokenEngine` agent loops drive (`VLLMAsyncTokenEngine`), awake.

        Raises:
            ValueError: an offline engine (built for single-turn batches only).
        """
        if not self.serve_async:
            raise ValueError(
                "agent loops (rows with an agent_name other than single_turn_agent) are not supported "
                "yet on the offline vLLM engine: set actor_rollout_ref.rollout.mode=async or "
                "multi_turn.enable=true so rollout.name=vllm starts its async server"
            )
        self.wake_up()
        return self.backend

    def close(self) -> None:
        """Shut the engine down and remove its scratch directories."""
        self.backend.close()

    # free_cache_engine: level-1 sleep offloads weights and frees the KV cache (CUDA only)
    def wake_up(self) -> None:
        """Wake a sleeping engine (before weight updates and generation)."""
        if self.sleeping:
            self.backend.wake_up()
            self.sleeping = False

    def sleep(self) -> None:
        """Put the engine to sleep between rollouts (``free_cache_engine`` on devices with sleep mode)."""
        if self.sleep_supported and not self.sleeping:
            self.backend.sleep(level=1)
            self.sleeping = True

    def update_weights(
        self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module, version: int | None = None
    ) -> None:
        """Load new weights into the engine in place, then drop its prefix cache (stale KV).

        Args:
            state_dict_or_model: the actor module (streamed in buckets; LoRA: only the adapter
                after the first call) or a full state dict with checkpoint names.
            version: the new ``policy_version`` (when given).

        Raises:
            RuntimeError: the engine has parameters the update did not cover.
        """
        start = time.perf_counter()
        self.wake_up()
        self.backend.update_weights(state_dict_or_model)
        self.last_update_s = time.perf_counter() - start
        if version is not None:
            self.set_policy_version(version)

    # bucket by bucket, from a rollout worker on its own resource pool (hybrid_engine=false)
    def begin_weight_update(self) -> None:
        """Start an update whose buckets arrive one call at a time (`load_weight_bucket`).

        Full state without LoRA; with LoRA the base weights on the first update, then only the adapter.
        """
        self._update_start = time.perf_counter()
        self.wake_up()
        self.weights.begin_stream()

    def load_weight_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        """Load one bucket of ``(actor state-dict name, full tensor)``: base weights in place, adapter kept."""
        self.weights.load_stream_bucket(bucket)

    def finish_weight_update(self) -> None:
        """Repack the reloaded layers, load the adapter (LoRA) and drop the prefix cache (stale KV).

        Raises:
            RuntimeError: the engine has parameters the update did not cover, or (LoRA) the first
                update had no base weights.
        """
        self.weights.finish_stream()
        self.backend.reset_prefix_cache()
        self.last_update_s = time.perf_counter() - getattr(self, "_update_start", time.perf_counter())

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per prompt; same inputs and outputs as `HFRollout.generate_sequences`.

        Raises:
            ValueError: no response length, right-padded or overlong prompts (as the hf engine).
            RuntimeError: generation before the first `update_weights`.
        """
        if not self.weights.synced:
            raise RuntimeError(
                "VLLMRollout.generate_sequences before update_weights: the engine has no actor weights yet"
            )
        meta = prompts.meta_info
        params = resolve_sampling(self.config, meta)
        response_length = int(meta.get("response_length", self.config.response_length) or 0)
        if response_length < 1:
            raise ValueError(f"rollout response_length must be set and >= 1, got {response_length}")
        eos_ids = layout.token_ids(meta.get("eos_token_id")) or self.eos_token_id
        pad_id = int(meta.get("pad_token_id", self.pad_token_id))
        input_ids, attention_mask, position_ids, carried = split_continuation(prompts, response_length, pad_id)
        layout.check_prompts(attention_mask, self.config.prompt_length, self.config.max_model_len, response_length)
        position_ids = layout.prompt_position_ids(attention_mask, position_ids)
        # a continuation resubmits prompt + prefix as the prompt, for the rest of the budget; its
        # seed is derived from (row seed, prefix length) so it does not replay the prefix's draws
        todo = (~carried.finished).nonzero().flatten().tolist()
        row_seeds = layout.row_seeds(prompts.batch, meta)
        seeds = row_seeds.tolist() if row_seeds is not None else [None] * len(prompts)
        requests, sampling = [], []
        for i in todo:
            done = int(carried.lengths[i])
            requests.append(input_ids[i][attention_mask[i].bool()].tolist() + carried.responses[i, :done].tolist())
            seed = seeds[i] if done == 0 or seeds[i] is None else int(derive_seeds([seeds[i], done], 1)[0])
            sampling.append(
                vllm_sampling_params(
                    params,
                    response_length - done,
                    eos_ids,
                    seed,
                    self.config.ignore_eos,
                    self.config.calculate_log_probs,
                    self.config.stop,
                    self.config.include_stop_str_in_output,
                )
            )
        with self._generation:  # `pause` waits for the call in progress (offline engine)
            self.wake_up()
            outputs = self.backend.run_batch(requests, sampling) if requests else []
            self.sleep()
        responses, lengths, log_probs = _collect(outputs, response_length, pad_id, self.stop_strings)
        versions = [
            list(getattr(o.outputs[0], "policy_versions", None) or [self.policy_version] * int(n))
            for o, n in zip(outputs, lengths.tolist(), strict=True)
        ]
        finished = [o.outputs[0].finish_reason in ("stop", "length") for o in outputs]
        merge_continuation(carried, todo, responses, lengths, log_probs, versions, finished)
        out_meta = {**meta, "temperature": params.logprob_temperature, "eos_token_id": eos_ids, "pad_token_id": pad_id}
        return layout.assemble(
            prompts,
            input_ids,
            attention_mask,
            carried.responses,
            carried.lengths,
            carried.log_probs if self.config.calculate_log_probs else None,
            carried.versions,
            position_ids=position_ids,
            finished=carried.finished,
            version=self.policy_version,
            meta_info=out_meta,
        )

    def score(self, token_ids: list[int]) -> torch.Tensor:
        """Engine log-probs `(len - 1,)` of ``token_ids[1:]`` given their prefixes (temperature 1).

        A teacher-forced check of the engine's weights, independent of sampling: vLLM's prompt
        log-probs of a fixed sequence, to compare with the actor's forward.
        """
        from vllm import SamplingParams as VSamplingParams

        self.wake_up()
        out = self.backend.run_batch(
            [list(token_ids)], [VSamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)]
        )[0]
        return torch.tensor([lp[t].logprob for lp, t in zip(out.prompt_logprobs[1:], token_ids[1:])])


def _collect(
    outputs: list[Any], response_length: int, pad_id: int, stop: StopStrings | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM outputs → responses `(B, R)` (pad after the end), lengths `(B,)`, log-probs `(B, R)` (0 after).

    With ``stop``, each output's token ids are cut again by `StopStrings.cut` (``include_stop_str_in_output``
    is a rule on vLLM's output text), so the tokens follow the hf engine's rule whatever vLLM's
    token ids keep of the stop text.
    """
    b = len(outputs)
    responses = torch.full((b, response_length), pad_id, dtype=torch.long)
    log_probs = torch.zeros(b, response_length, dtype=torch.float32)
    lengths = torch.zeros(b, dtype=torch.long)
    for i, out in enumerate(outputs):
        completion = out.outputs[0]
        ids = list(completion.token_ids)[:response_length]
        cut = stop.cut(ids) if stop is not None and ids else None
        ids = ids if cut is None else ids[:cut]
        lengths[i] = len(ids)
        if ids:
            responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        if completion.logprobs is not None:
            log_probs[i, : len(ids)] = torch.tensor([lp[t].logprob for lp, t in zip(completion.logprobs, ids)])
    return responses, lengths, log_probs


def serves_agent_loops(config: Any) -> bool:
    """Whether the rollout section asks for agent loops: ``multi_turn.enable``, ``mode=async``,
    ``over_sample_rate > 0`` or a default agent loop other than ``single_turn_agent``."""
    return (
        bool(config.multi_turn.enable)
        or config.mode == "async"
        or float(config.over_sample_rate or 0) > 0
        or config.agent.default_agent_loop != "single_turn_agent"
    )


def build(module: nn.Module, config: Any, tokenizer: Any) -> VLLMRollout:
    """``ROLLOUT_ENGINES["vllm"]``: one `VLLMRollout` per worker.

    With agent loops (`serves_agent_loops`) its engine is vLLM's async engine, which serves
    the agent loops' concurrent requests and single-turn batches alike; otherwise the offline
    `vllm.LLM`, in this process when the worker is alone (see the module docstring).
    """
    import torch.distributed as dist

    if serves_agent_loops(config):
        return VLLMRollout(module, config, tokenizer, serve_async=True)
    alone = not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
    return VLLMRollout(module, config, tokenizer, in_process=alone)
