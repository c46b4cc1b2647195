"""The token-level request API under every rollout engine (the ``workers/rollout`` layer).

One request = one prompt's token ids + its sampling settings; one output = the new token ids,
their log-probs under the sampling distribution (``log_softmax(logits / τ)``, before top-k /
top-p filtering, as `verl.workers.rollout.sampling` defines them) and why generation stopped.
Agent loops (``single_turn_agent``, ``tool_agent``) drive any engine through this API only,
concurrently from asyncio, so the same loop runs on the ``hf`` engine and on vLLM.

An engine that serves this API implements `AsyncTokenEngine`; requests issued concurrently may
be batched by the engine, but each request's tokens depend only on its own prompt, sampling
settings and ``seed`` (never on what else is in flight), so results do not depend on batching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from verl.workers.rollout.sampling import SamplingParams

__all__ = ["AsyncTokenEngine", "FinishReason", "TokenOutput", "TokenRequest"]

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class TokenRequest:
    """One generation request.

    Attributes:
        prompt_ids: the full context so far (prompt, earlier turns, tool / user responses), ids.
        sampling: temperature / top-k / top-p / greedy (`SamplingParams`).
        max_new_tokens: at most this many tokens are generated (> 0).
        seed: per-request sampling seed; None = the engine's own generator.
        stop_token_ids: ids that end generation (included in the output); None = the engine's
            default (every EOS id of the model and tokenizer).
        request_id: free-form id for logs and tracing.
    """

    prompt_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_new_tokens: int = 1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] | None = None
    request_id: str = ""


@dataclass(frozen=True)
class TokenOutput:
    """What a request produced.

    Attributes:
        token_ids: generated ids, stop token included when one was produced (length ≤ max_new_tokens).
        log_probs: log-prob of each generated id under the sampling distribution, same length.
        finish_reason: ``stop`` (a stop id), ``length`` (max_new_tokens reached) or ``abort``.
        policy_versions: the policy version that sampled each id (same length; a generation
            paused for a weight update and resumed spans versions), None = the engine does not
            track versions (the caller then tags the turn with the engine's ``policy_version``).
    """

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: FinishReason
    policy_versions: list[int] | None = None


@runtime_checkable
class AsyncTokenEngine(Protocol):
    """An engine that answers `TokenRequest`s concurrently (asyncio)."""

    async def generate(self, request: TokenRequest) -> TokenOutput:
        """Generate for one request; may be awaited concurrently with others."""
        ...
