"""Agent loops: one coroutine per trajectory that drives a token engine (verl's AgentLoop shape).

An agent loop receives one row of the prompt batch (its prompt ids, messages, ``extra_info``,
sampling seed, ...) and returns an `AgentLoopOutput`: the prompt ids, the response ids after the
prompt (model turns interleaved with tool / user turns), a ``response_mask`` that is 1 exactly on
model-generated tokens, the sampling log-prob of each model token (0 elsewhere), the number of
turns and per-trajectory metrics. `AGENT_LOOPS` maps the names rows select with their
``agent_name`` column (``single_turn_agent``, ``tool_agent``) to loop classes; every entry is
built as ``cls(context)`` with one shared `AgentContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from verl.utils.registry import Registry
from verl.workers.rollout.request import AsyncTokenEngine, TokenOutput
from verl.workers.rollout.sampling import SamplingParams

__all__ = ["AGENT_LOOPS", "AgentContext", "AgentLoop", "AgentLoopOutput", "AgentRow", "turn_versions"]


@dataclass
class AgentRow:
    """One trajectory's inputs, taken from a row of the prompt batch.

    Attributes:
        prompt_ids: the dataset's prompt ids (unpadded), what a single-turn rollout sends.
        messages: the raw chat messages (``raw_prompt``), None when the data has none.
        extra_info: the row's ``extra_info`` (``tools_kwargs``, ``interaction_kwargs``, ``index``).
        seed: sampling seed of the trajectory (``sample_seeds``); None = the engine's generator.
        index: position of the row in the batch (for request ids).
        rendered_prompt_ids: the prompt the agent loop actually sent (set by the loop once
            rendered; used for a trajectory aborted by ``over_sample_rate``).
    """

    prompt_ids: list[int]
    messages: list[dict[str, Any]] | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    index: int = 0
    rendered_prompt_ids: list[int] | None = None


@dataclass
class AgentContext:
    """What every agent loop of a batch shares.

    Attributes:
        engine: the token engine (`AsyncTokenEngine`).
        tokenizer: the actor's tokenizer.
        config: the rollout section (`RolloutConfig`).
        sampling: the batch's resolved sampling settings.
        response_length: the whole trajectory's token budget after the prompt.
        stop_token_ids: stop ids of model turns (None = the engine's default).
        tools: tool name -> `BaseTool` (tool_agent only).
        interactions: interaction name -> `BaseInteraction` (tool_agent only).
        template_kwargs: extra ``apply_chat_template`` keywords.
    """

    engine: AsyncTokenEngine
    tokenizer: Any
    config: Any
    sampling: SamplingParams
    response_length: int
    stop_token_ids: tuple[int, ...] | None = None
    tools: dict[str, Any] = field(default_factory=dict)
    interactions: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentLoopOutput:
    """One finished trajectory.

    Attributes:
        prompt_ids: prompt ids `(P_i,)` as sent to the engine for the first turn.
        response_ids: everything after the prompt `(R_i,)`, R_i <= response_length.
        response_mask: `(R_i,)` 1 on model-generated tokens, 0 on tool / user tokens.
        response_logprobs: `(R_i,)` sampling log-prob of model tokens, 0.0 elsewhere.
        num_turns: assistant + tool + user turns after the prompt (verl counts the prompt's
            user turn too; here it is 1 for a single-turn rollout: the assistant turn).
        metrics: per-trajectory counts (``tool_calls``, ``tool_errors``, ...).
        messages: the final conversation (for dumps and the reward), None for single turn.
        tool_calls: every parsed call ``{"name", "arguments", "status"}`` in order.
        turn_scores: the interaction's score per user turn.
        tool_rewards: each called tool's ``calc_reward`` at the end of the trajectory.
        response_versions: `(R_i,)` policy version that sampled each model token, -1 on tool /
            user tokens (``rollout_policy_versions``); empty = not tracked (all model tokens
            then get the engine's version at the end of the trajectory).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    num_turns: int = 1
    metrics: dict[str, float] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)
    tool_rewards: list[float] = field(default_factory=list)
    response_versions: list[int] = field(default_factory=list)


class AgentLoop(Protocol):
    """One trajectory per ``run`` call; instances are built with ``cls(context)``."""

    async def run(self, row: AgentRow) -> AgentLoopOutput:
        """Roll out one trajectory for ``row``."""
        ...


def turn_versions(engine: Any, out: TokenOutput) -> list[int]:
    """The policy version of each token of a model turn: the engine's own tags, else the token
    engine's ``policy_version`` now (0 for an engine without versions)."""
    if out.policy_versions is not None:
        return list(out.policy_versions)
    return [int(getattr(engine, "policy_version", 0) or 0)] * len(out.token_ids)


AGENT_LOOPS: Registry[type] = Registry("agent loop")
