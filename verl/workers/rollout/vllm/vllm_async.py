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

`verl.workers.rollout.vllm.vllm_rollout.VLLMRollout` holds one of these as its engine when the
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
from verl.workers.rollout.vllm.vllm_config import (
    eos_and_pad,
    lora_rank_of,
    prepare_engine,
    restore_process_state,
    vllm_sampling_params,
)
from verl.workers.rollout.vllm.vllm_weights import EngineWeightSync
from verl.workers.rollout.weight_sync import bucket_bytes_of, is_lora_model

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
        self.policy_version = 0  # tags the tokens of each request segment (set by VLLMRollout)
        self._live: set[str] = set()  # request ids in flight (aborted at a pause)
        self._resumed = asyncio.Event()  # cleared while paused; created on no loop (Python >= 3.10)
        self._resumed.set()
        self._interrupted = False
        with restore_process_state():  # vLLM lowers torch's thread count and re-seeds the global RNGs
            self.engine = self._call(self._start(args))
        self.weights = EngineWeightSync(
            self._rpc,
            lambda lora_id: self._call(self.engine.remove_lora(lora_id)),
            lora=is_lora_model(module),
            via_files=True,
            bucket_bytes=bucket_bytes_of(config),
        )

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
        params = vllm_sampling_params(
            request.sampling,
            request.max_new_tokens,
            stop,
            request.seed,
            self.config.ignore_eos,
            self.config.calculate_log_probs,
        )
        future = asyncio.run_coroutine_threadsafe(
            self._request(request.prompt_ids, params, request.request_id), self._loop
        )
        completion = (await asyncio.wrap_future(future)).outputs[0]
        ids = list(completion.token_ids)
        log_probs = (
            [lp[t].logprob for lp, t in zip(completion.logprobs, ids)] if completion.logprobs else [0.0] * len(ids)
        )
        reason = completion.finish_reason if completion.finish_reason in ("stop", "length") else "abort"
        return TokenOutput(
            token_ids=ids, log_probs=log_probs, finish_reason=reason, policy_versions=list(completion.policy_versions)
        )

    def run_batch(self, prompts: list[list[int]], params: list[Any], lora_request: Any = None) -> list[Any]:
        """Submit every prompt at once and wait for all (synchronous): vLLM ``RequestOutput``s in order.

        The batch form behind `VLLMRollout.generate_sequences` and ``score`` (same outputs as
        ``vllm.LLM.generate``); ``lora_request`` None = the current adapter, if any.
        """
        self._check_synced()
        lora = lora_request if lora_request is not None else self.weights.lora_request()

        async def gather() -> list[Any]:
            return await asyncio.gather(
                *(self._request(p, sp, "batch", lora) for p, sp in zip(prompts, params, strict=True))
            )

        return self._call(gather())

    # partial rollouts: a pause aborts every request in flight (vLLM returns each one's tokens so
    # far, finish reason "abort"); after resume each is resubmitted with prompt + those tokens for
    # the rest of its budget, as many times as it is paused; an interrupt ends it there instead
    def pause(self) -> None:
        """Abort the requests in flight and hold new ones until `resume` (they continue then)."""
        self._call(self._pause())

    def resume(self) -> None:
        """Resubmit the paused requests' prefixes under the weights loaded now."""
        self._call(self._resume())

    def interrupt(self) -> None:
        """Abort the requests in flight for good: they return their tokens so far, ``abort``."""
        self._interrupted = True
        self._call(self._abort_live())

    def clear_interrupt(self) -> None:
        """Let requests run to their end again after `interrupt`."""
        self._interrupted = False

    async def _pause(self) -> None:
        self._resumed.clear()
        await self._abort_live()

    async def _resume(self) -> None:
        self._resumed.set()

    async def _abort_live(self) -> None:
        if self._live:
            await self.engine.abort(sorted(self._live))

    async def _request(self, prompt_ids: list[int], params: Any, tag: str, lora_request: Any = None) -> Any:
        """One request on the engine's loop, resubmitted after each pause; a `SegmentedOutput`."""
        ids: list[int] = []
        log_probs: list[Any] = []
        versions: list[int] = []
        final = None
        while True:
            await self._resumed.wait()
            version = self.policy_version
            segment = params if not ids else _rest_of(params, len(ids))
            output = await self._segment(list(prompt_ids) + ids, segment, tag, lora_request)
            final = output if output is not None else final  # aborted before its first token: None
            completion = output.outputs[0] if output is not None else None
            new = list(completion.token_ids) if completion is not None else []
            ids += new
            log_probs += list(completion.logprobs or []) if completion is not None else []
            versions += [version] * len(new)
            ended = completion is not None and completion.finish_reason in ("stop", "length")
            if ended or self._interrupted or len(ids) >= params.max_tokens:
                break
        reason = final.outputs[0].finish_reason if final is not None and ended else "abort"
        has_logprobs = final is not None and final.outputs[0].logprobs is not None
        return SegmentedOutput(final, ids, log_probs if has_logprobs else None, versions, reason)

    async def _segment(self, prompt_ids: list[int], params: Any, tag: str, lora_request: Any) -> Any:
        """One vLLM request; its final ``RequestOutput``."""
        request_id = f"{tag or 'verl'}-{next(self._ids)}"
        final = None
        self.in_flight += 1  # only this loop's thread touches the counters
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self._live.add(request_id)
        try:
            async for output in self.engine.generate(
                {"prompt_token_ids": list(prompt_ids)},
                params,
                request_id,
                lora_request=lora_request or self.weights.lora_request(),
            ):
                final = output
        finally:
            self.in_flight -= 1
            self._live.discard(request_id)
        return final

    def _check_synced(self) -> None:
        if not self.weights.synced:
            raise RuntimeError(
                "VLLMAsyncTokenEngine.generate before update_weights: the engine has no actor weights yet"
            )

    def close(self) -> None:
        """Stop the engine process and the loop thread; remove scratch directories."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            self._loop.call_soon_threadsafe(engine.shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self.weights.close()
        shutil.rmtree(self._model_dir, ignore_errors=True)


class _Completion:
    """``outputs[0]`` of a `SegmentedOutput`: vLLM's fields the callers read, plus versions."""

    def __init__(
        self, token_ids: list[int], logprobs: list[Any] | None, finish_reason: Any, versions: list[int]
    ) -> None:
        self.token_ids, self.logprobs, self.finish_reason, self.policy_versions = (
            token_ids,
            logprobs,
            finish_reason,
            versions,
        )


class SegmentedOutput:
    """A request's output over all its segments (vLLM ``RequestOutput`` fields the callers read:
    ``outputs[0].token_ids / logprobs / finish_reason``; ``prompt_logprobs`` of the last segment),
    with ``outputs[0].policy_versions`` per token; finish reason ``abort`` unless it ended."""

    def __init__(
        self, final: Any, token_ids: list[int], logprobs: list[Any] | None, versions: list[int], finish_reason: str
    ) -> None:
        self.prompt_logprobs = getattr(final, "prompt_logprobs", None)
        self.outputs = [_Completion(token_ids, logprobs, finish_reason, versions)]


def _rest_of(params: Any, produced: int) -> Any:
    """vLLM sampling params for the rest of a request after ``produced`` tokens: the remaining
    budget, a seed derived from (seed, produced) so the continuation does not replay the draws."""
    from verl.workers.rollout.layout import derive_seeds

    rest = params.clone()
    rest.max_tokens = int(params.max_tokens) - produced
    if params.seed is not None:
        rest.seed = int(derive_seeds([int(params.seed) % (2**63), produced], 1)[0])
    return rest
