"""``single_turn_agent``: the dataset's prompt ids in, one assistant turn out."""

from __future__ import annotations

from verl.workers.rollout.agent_loop.base import AGENT_LOOPS, AgentContext, AgentLoopOutput, AgentRow, turn_versions
from verl.workers.rollout.request import TokenRequest

__all__ = ["SingleTurnAgentLoop"]


@AGENT_LOOPS.register("single_turn_agent")
class SingleTurnAgentLoop:
    """One request with the row's prompt ids, ``response_length`` new tokens and the row's seed;
    every generated token is a model token (``response_mask`` all 1).

    With the row's ``sample_seeds`` this reproduces `HFRollout.generate_sequences` token for token
    (same prompt ids, same per-row generator), so routing a batch through agent loops does not
    change single-turn training.
    """

    def __init__(self, context: AgentContext) -> None:
        self.ctx = context

    async def run(self, row: AgentRow) -> AgentLoopOutput:
        """Generate the single assistant turn of ``row``."""
        out = await self.ctx.engine.generate(
            TokenRequest(
                prompt_ids=list(row.prompt_ids),
                sampling=self.ctx.sampling,
                max_new_tokens=self.ctx.response_length,
                seed=row.seed,
                stop_token_ids=self.ctx.stop_token_ids,
                request_id=f"{row.index}-0",
            )
        )
        n = len(out.token_ids)
        return AgentLoopOutput(
            prompt_ids=list(row.prompt_ids),
            response_ids=list(out.token_ids),
            response_mask=[1] * n,
            response_logprobs=list(out.log_probs),
            num_turns=1,
            metrics={
                "finish_length": float(out.finish_reason == "length"),
                "aborted": float(out.finish_reason == "abort"),
            },
            response_versions=turn_versions(self.ctx.engine, out),
        )
