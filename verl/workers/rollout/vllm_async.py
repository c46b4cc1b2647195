"""`AsyncTokenEngine` on vLLM's async engine (`vllm.v1.engine.async_llm.AsyncLLM`), for agent loops.

Concurrent `generate` calls (asyncio) become concurrent vLLM requests, which vLLM's scheduler
batches continuously (a trajectory waiting for its tool does not hold up the others); each
request carries its own seed, so a request's tokens depend only on its prompt, sampling settings
and seed (`verl.workers.rollout.request`).

`AsyncLLM` runs its engine core in a child process and must be driven from the event loop that
created it; this class owns that loop on a private thread, so `generate` can be awaited from any
loop (the agent loops' ``asyncio.run`` of each batch) and `update_weights`, `run_batch`, `sleep`,
`wake_up` and `close` can be called from plain (synchronous) code. Weights move exactly as for the
synchronous engine (`EngineWeightSync`: buckets through ``collective_rpc``, each serialised as a
safetensors file in RAM into the engine process; LoRA: only the adapter), then the prefix cache
is reset (cached KV of the old weights is stale).

`verl.workers.rollout.vllm_rollout.VLLMRollout` holds one of these as its engine when the
rollout runs agent loops (``serve_async``); it is also usable alone.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.vllm_config import eos_and_pad, lora_rank_of, prepare_engine, restore_process_state, vllm_sampling_params
from verl.workers.rollout.vllm_weights import EngineWeightSync, bucket_bytes_of, is_lora_model

__all__ = ["VLLMAsyncTokenEngine"]

T = TypeVar("T")


class VLLMAsyncTokenEngine:
    """Serves `TokenRequest`s concurrently with vLLM's async engine.

    Args:
        module: the actor (its config, dtype; weights arrive by `update_weights`).
        config: the rollout section (`RolloutConfig`): engine keys as for ``rollout.name=vllm``;
            ``ignore_eos`` and ``calculate_log_probs`` apply to every request.
        tokenizer: the actor's tokenizer (default stop ids), or None.
    """

    def __init__(self, module: nn.Module, config: Any, tokenizer: Any = None) -> None:
        self.config = config
        self.eos_token_id, self.pad_token_id = eos_and_pad(module, tokenizer)
        args, self._model_dir = prepare_engine(config, module, lora_rank_of(module))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # never pin the trainer's threads
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="verl-vllm-async", daemon=True)
        self._thread.start()
        self._ids = itertools.count()
        self.in_flight = self.max_in_flight = 0  # vLLM requests submitted and not finished (tests, metrics)
        with restore_process_state():  # vLLM lowers torch's thread count and re-seeds the global RNGs
            self.engine = self._call(self._start(args))
        self.weights = EngineWeightSync(self._rpc, lambda lora_id: self._call(self.engine.remove_lora(lora_id)),
                                        lora=is_lora_model(module), via_files=True, bucket_bytes=bucket_bytes_of(config))

    @staticmethod
    async def _start(args: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**args))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the engine's loop and wait for it (from synchronous code)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _rpc(self, method: str, args: tuple) -> list[Any]:
        return self._call(self.engine.collective_rpc(method, args=args))

    def update_weights(self, state_dict_or_model: Mapping[str, torch.Tensor] | nn.Module) -> None:
        """Load the actor's weights (module: buckets / LoRA adapter; or a full state dict) in place.

        Call it between rollouts, not while requests are in flight.

        Raises:
            RuntimeError: the engine has parameters the update did not cover.
        """
        self.weights.update(state_dict_or_model)
        self._call(self.engine.reset_prefix_cache())

    def reset_prefix_cache(self) -> None:
        """Drop cached KV (computed with the previous weights)."""
        self._call(self.engine.reset_prefix_cache())

    def sleep(self, level: int = 1) -> None:
        """vLLM sleep mode (GPU): level 1 offloads the weights and frees the KV cache."""
        self._call(self.engine.sleep(level))

    def wake_up(self) -> None:
        """Undo `sleep`."""
        self._call(self.engine.wake_up())

    async def generate(self, request: TokenRequest) -> TokenOutput:
        """Generate for one request (`AsyncTokenEngine`); may be awaited concurrently from any loop.

        Cancelling the awaiting task aborts the vLLM request.

        Raises:
            RuntimeError: before the first `update_weights`.
        """
        self._check_synced()
        stop = list(request.stop_token_ids) if request.stop_token_ids is not None else self.eos_token_id
        params = vllm_sampling_params(request.sampling, request.max_new_tokens, stop, request.seed,
                                      self.config.ignore_eos, self.config.calculate_log_probs)
        future = asyncio.run_coroutine_threadsafe(self._request(request.prompt_ids, params, request.request_id), self._loop)
        completion = (await asyncio.wrap_future(future)).outputs[0]
        ids = list(completion.token_ids)
        log_probs = [lp[t].logprob for lp, t in zip(completion.logprobs, ids)] if completion.logprobs else [0.0] * len(ids)
        reason = completion.finish_reason if completion.finish_reason in ("stop", "length") else "abort"
        return TokenOutput(token_ids=ids, log_probs=log_probs, finish_reason=reason)

    def run_batch(self, prompts: list[list[int]], params: list[Any], lora_request: Any = None) -> list[Any]:
        """Submit every prompt at once and wait for all (synchronous): vLLM ``RequestOutput``s in order.

        The batch form behind `VLLMRollout.generate_sequences` and ``score`` (same outputs as
        ``vllm.LLM.generate``); ``lora_request`` None = the current adapter, if any.
        """
        self._check_synced()
        lora = lora_request if lora_request is not None else self.weights.lora_request()

        async def gather() -> list[Any]:
            return await asyncio.gather(*(self._request(p, sp, "batch", lora) for p, sp in zip(prompts, params, strict=True)))

        return self._call(gather())

    async def _request(self, prompt_ids: list[int], params: Any, tag: str, lora_request: Any = None) -> Any:
        """One vLLM request on the engine's loop; its final ``RequestOutput``."""
        request_id = f"{tag or 'verl'}-{next(self._ids)}"
        final = None
        self.in_flight += 1  # only this loop's thread touches the counters
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            async for output in self.engine.generate({"prompt_token_ids": list(prompt_ids)}, params, request_id,
                                                     lora_request=lora_request or self.weights.lora_request()):
                final = output
        finally:
            self.in_flight -= 1
        return final

    def _check_synced(self) -> None:
        if not self.weights.synced:
            raise RuntimeError("VLLMAsyncTokenEngine.generate before update_weights: the engine has no actor weights yet")

    def close(self) -> None:
        """Stop the engine process and the loop thread; remove scratch directories."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            self._loop.call_soon_threadsafe(engine.shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self.weights.close()
        shutil.rmtree(self._model_dir, ignore_errors=True)
