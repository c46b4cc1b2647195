"""The ``hf`` engine behind the token-level request API (`AsyncTokenEngine`).

`HFTokenServer` answers `TokenRequest`s awaited concurrently from one asyncio event loop (the
agent loops of a batch). Requests are collected while the loop runs the other coroutines up to
their next ``await``; the pending ones are then generated together in batched prefill + decode
passes of `HFRollout` (at most ``rollout.max_num_seqs`` per pass, grouped by sampling settings
and stop ids), in a worker thread so that tool calls and user simulators keep running, and each
future is resolved with its own `TokenOutput`.

Independence of batching: every request samples with its own generator (``request.seed``;
`verl.workers.rollout.sampling.sample_tokens` draws one uniform per row by inverse CDF), and a
request that is shorter than its batch mates is cut to its own ``max_new_tokens`` after the pass,
so a request's tokens depend only on its prompt, sampling settings and seed. A request without a
seed gets one drawn from the engine's generator in arrival order. Checked on CPU in float32
(tests/workers/rollout/agent_loop/test_agent_loop_single_turn.py); on a GPU, matmul kernels chosen by batch shape
may round a row's logits differently, which can flip a near-tie sample.
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from verl.modules.forward import position_ids_from_attention_mask
from verl.workers.rollout.hf.hf_rollout import HFRollout
from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.sampling import SamplingParams

__all__ = ["HFTokenServer"]


class HFTokenServer:
    """Batches concurrent `TokenRequest`s onto an `HFRollout`.

    Args:
        engine: the ``hf`` engine (its module, stop / pad ids, dtype, cache kind and
            ``max_num_seqs`` are used).

    One server serves one event loop at a time (create it, or call `generate`, inside the loop
    that awaits the requests).
    """

    def __init__(self, engine: HFRollout) -> None:
        self.engine = engine
        self._pending: list[tuple[TokenRequest, asyncio.Future[TokenOutput]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.num_passes = 0  # batched generation passes run (for tests and metrics)

    @property
    def policy_version(self) -> int:
        """The engine's current policy version (`verl.workers.rollout.partial`)."""
        return int(self.engine.policy_version)

    async def generate(self, request: TokenRequest) -> TokenOutput:
        """Generate for one request; see `AsyncTokenEngine.generate`.

        Raises:
            ValueError: ``max_new_tokens`` < 1 or an empty prompt.
        """
        if request.max_new_tokens < 1:
            raise ValueError(f"TokenRequest.max_new_tokens must be >= 1, got {request.max_new_tokens}")
        if not request.prompt_ids:
            raise ValueError("TokenRequest.prompt_ids is empty")
        if request.seed is None and not request.sampling.greedy:
            seed = int(torch.randint(0, 2**62, (1,), generator=self.engine._generator))
            request = TokenRequest(
                request.prompt_ids,
                request.sampling,
                request.max_new_tokens,
                seed,
                request.stop_token_ids,
                request.request_id,
            )
        future: asyncio.Future[TokenOutput] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        """Generate every pending request, in passes of at most ``max_num_seqs``."""
        cap = max(int(self.engine.config.max_num_seqs), 1)
        while self._pending:
            await asyncio.sleep(0)  # let agent loops started in the same tick enqueue their turn
            self._pending = [p for p in self._pending if not p[1].done()]  # drop aborted requests
            if not self._pending:
                break
            groups: dict[tuple[SamplingParams, tuple[int, ...] | None], list[int]] = {}
            for i, (req, _) in enumerate(self._pending):
                groups.setdefault((req.sampling, req.stop_token_ids), []).append(i)
            first = set(next(iter(groups.values()))[:cap])
            taken = [p for i, p in enumerate(self._pending) if i in first]
            self._pending = [p for i, p in enumerate(self._pending) if i not in first]
            try:
                outputs = await asyncio.to_thread(self.generate_batch, [r for r, _ in taken])
            except Exception as e:  # every waiting request learns why its pass failed
                for _, fut in taken:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), out in zip(taken, outputs, strict=True):
                if not fut.done():
                    fut.set_result(out)

    def generate_batch(self, requests: list[TokenRequest]) -> list[TokenOutput]:
        """One batched pass for requests sharing sampling settings and stop ids (synchronous).

        Prompts are left-padded into one `(B, P)` batch; the pass decodes ``max(max_new_tokens)``
        steps and each output is cut to its own request's ``max_new_tokens``.
        """
        eng = self.engine
        params, stop = requests[0].sampling, requests[0].stop_token_ids
        eos_ids = list(stop) if stop is not None else eng.eos_token_id
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), eng.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(requests), width, dtype=torch.long)
        for row, req in enumerate(requests):
            ids[row, width - len(req.prompt_ids) :] = torch.tensor(req.prompt_ids, dtype=torch.long)
            mask[row, width - len(req.prompt_ids) :] = 1
        steps = max(r.max_new_tokens for r in requests)
        seeds = torch.tensor([r.seed if r.seed is not None else 0 for r in requests], dtype=torch.long)
        was_training = eng.module.training
        eng.module.eval()
        try:
            with torch.no_grad(), eng._autocast():  # grad mode is per thread: set it here
                responses, lengths, log_probs, versions, finished = eng._generate_batch(
                    ids,
                    mask,
                    position_ids_from_attention_mask(mask),
                    steps,
                    params,
                    eos_ids,
                    eng.pad_token_id,
                    eng._generator,
                    seeds,
                )
        finally:
            eng.module.train(was_training)
        self.num_passes += 1
        return [
            self._output(req, responses[i], int(lengths[i]), log_probs[i], versions[i], bool(finished[i]), eos_ids)
            for i, req in enumerate(requests)
        ]

    def _output(
        self,
        req: TokenRequest,
        tokens: torch.Tensor,
        length: int,
        logp: torch.Tensor,
        versions: torch.Tensor,
        finished: bool,
        eos_ids: list[int],
    ) -> TokenOutput:
        """A row's output; ``abort`` when the pass was interrupted before the row finished."""
        n = min(length, req.max_new_tokens)
        token_ids = tokens[:n].tolist()
        stopped = bool(token_ids) and token_ids[-1] in eos_ids and not self.engine.config.ignore_eos
        reason = "stop" if stopped else ("length" if finished or n >= req.max_new_tokens else "abort")
        return TokenOutput(
            token_ids=token_ids,
            log_probs=logp[:n].tolist(),
            finish_reason=reason,
            policy_versions=versions[:n].tolist(),
        )


def as_token_engine(engine: Any) -> Any:
    """The `AsyncTokenEngine` of a rollout engine: itself when it serves the request API, what
    its ``token_engine()`` method returns when it has one (an engine whose request API lives in
    a separate object, e.g. a server), an `HFTokenServer` for `HFRollout`.

    Raises:
        TypeError: an engine that offers none of these (agent loops need the request API).
    """
    from verl.workers.rollout.request import AsyncTokenEngine

    if isinstance(engine, AsyncTokenEngine):
        return engine
    if callable(getattr(engine, "token_engine", None)):
        return engine.token_engine()
    if isinstance(engine, HFRollout):
        return HFTokenServer(engine)
    raise TypeError(
        f"{type(engine).__name__} does not serve the token-level request API (needed by agent "
        "loops): give it an async generate(TokenRequest) or a token_engine() method"
    )
