"""``tool_agent``: multi-turn rollouts with tool calls (Hermes format) and user-simulator turns.

One trajectory (``multi_turn.*`` keys of the rollout section):

1. the prompt is the row's messages rendered with the tool schemas (`ChatTemplate`);
2. the model generates an assistant turn (at most the budget left: ``response_length`` counts
   every token after the prompt, model, tool and user tokens alike);
3. its ``<tool_call>`` blocks outside reasoning are parsed (`verl.tools.parser`, at most
   ``max_parallel_calls``; a turn that starts inside a ``<think>`` the generation prompt opened
   counts calls only after its ``</think>``); each valid call runs contained
   (`verl.tools.calling.ToolSession`: errors, timeouts and garbage become error responses), a
   malformed call becomes an error response too; the responses, truncated to
   ``max_tool_response_length`` characters on ``tool_response_truncate_side``, are appended as
   one tool turn and the loop goes to 2;
4. a turn without tool calls goes to the row's interaction (``extra_info.interaction_kwargs.name``)
   when there is one: it answers as the user (or ends the trajectory) and the loop goes to 2;
5. the trajectory ends at a turn without calls and without an interaction, when the model is cut
   off by the budget, after ``max_assistant_turns`` assistant turns or ``max_user_turns`` user
   turns, or when a tool / user turn does not leave room for one more model token. Such a turn
   is not appended at all, neither to the ids nor to ``messages`` (verl's rule: its tools have
   run and count, its text is dropped), so a trajectory always ends on a model token and its ids
   match its messages; a turn that fits exactly (it would fill the budget to the last token)
   ends the trajectory the same way, as nothing could follow it. Metric ``turn_over_budget``
   (0/1) marks it.

Templates that are not append-only are handled per turn by `ChatTemplate.append_ids` (the
model's ids are kept; only the new turn's difference is rendered); ``non_append_only_turns``
counts such turns, and the final ``tokenization_mismatch`` flag reports the row.

Model tokens get ``response_mask`` 1 and their sampling log-probs; tool and user tokens get 0.
Turn ``t`` of a row samples with a seed derived from (row seed, t), so trajectories do not
depend on batching either.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any


from verl.workers.rollout.agent_loop.base import AGENT_LOOPS, AgentContext, AgentLoopOutput, AgentRow, turn_versions
from verl.workers.rollout.agent_loop.chat import ChatTemplate
from verl.workers.rollout.request import TokenRequest
from verl.workers.rollout.layout import derive_seeds

__all__ = ["ToolAgentLoop", "turn_seed"]


def turn_seed(seed: int | None, turn: int) -> int | None:
    """Sampling seed of assistant turn ``turn`` (0-based): the row's own seed for turn 0."""
    if seed is None or turn == 0:
        return seed
    return int(derive_seeds([int(seed) % (2**63), turn], 1)[0])


@AGENT_LOOPS.register("tool_agent")
class ToolAgentLoop:
    """The multi-turn loop of the module docstring; ``context.tools`` / ``context.interactions``
    hold the loaded tools and interactions, ``context.config.multi_turn`` the limits."""

    def __init__(self, context: AgentContext) -> None:
        self.ctx = context
        self.mt = context.config.multi_turn
        self.chat = ChatTemplate(
            context.tokenizer, [t.tool_schema for t in context.tools.values()] or None, context.template_kwargs
        )

    async def run(self, row: AgentRow) -> AgentLoopOutput:
        """Roll out one multi-turn trajectory for ``row``.

        Raises:
            ValueError: the row has no messages (``data.return_raw_chat`` must be true), or names
                an interaction that is not configured.
        """
        from verl.tools.calling import ToolSession

        if not row.messages:
            raise ValueError("tool_agent needs each row's chat messages: set data.return_raw_chat=true")
        messages = [dict(m) for m in row.messages]
        prompt_ids = self.chat.prompt_ids(messages)
        row.rendered_prompt_ids = prompt_ids
        session = ToolSession(
            self.ctx.tools,
            row.extra_info.get("tools_kwargs") or {},
            max_response_length=self.mt.max_tool_response_length,
            truncate_side=self.mt.tool_response_truncate_side,
        )
        interaction, interaction_kwargs, instance = await self._start_interaction(row)
        out = AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=[], response_mask=[], response_logprobs=[], num_turns=0
        )
        counts = {"assistant": 0, "user": 0, "malformed": 0, "over_budget": 0, "non_append_only": 0, "aborted": 0}
        try:
            await self._loop(row, messages, out, session, interaction, interaction_kwargs, instance, counts)
        finally:
            tool_rewards = await session.close()
            if interaction is not None:
                await interaction.finalize_interaction(instance, **interaction_kwargs)
        out.tool_rewards = list(tool_rewards.values())
        out.messages = messages
        out.metrics = {
            "tool_calls": float(sum(session.counts.values()) - counts["malformed"]),
            "tool_errors": float(session.counts["error"] - counts["malformed"]),
            "tool_timeouts": float(session.counts["timeout"]),
            "malformed_tool_calls": float(counts["malformed"]),
            "assistant_turns": float(counts["assistant"]),
            "user_turns": float(counts["user"]),
            "turn_over_budget": float(counts["over_budget"]),
            "non_append_only_turns": float(counts["non_append_only"]),
            "aborted": float(counts["aborted"]),
        }
        mismatch = self.chat.sanity_check(
            prompt_ids + out.response_ids, messages, self.mt.tokenization_sanity_check_mode
        )
        out.metrics["tokenization_mismatch"] = float(mismatch is not None)
        return out

    async def _start_interaction(self, row: AgentRow) -> tuple[Any, dict[str, Any], str]:
        """The row's interaction (``extra_info.interaction_kwargs.name``), started; none when no
        interaction is configured (tool-only recipes keep the column in their data)."""
        from verl.interactions import select_interaction

        kwargs = dict(row.extra_info.get("interaction_kwargs") or {})
        if not kwargs or not self.ctx.interactions:
            return None, {}, ""
        interaction = select_interaction(self.ctx.interactions, kwargs)
        instance = await interaction.start_interaction(f"{row.index}-{uuid.uuid4().hex[:8]}", **kwargs)
        return interaction, kwargs, instance

    async def _loop(
        self,
        row: AgentRow,
        messages: list[dict[str, Any]],
        out: AgentLoopOutput,
        session: Any,
        interaction: Any,
        interaction_kwargs: dict[str, Any],
        instance: str,
        counts: dict[str, int],
    ) -> None:
        budget = self.ctx.response_length
        while len(out.response_ids) < budget:
            context = out.prompt_ids + out.response_ids
            gen = await self.ctx.engine.generate(
                TokenRequest(
                    prompt_ids=context,
                    sampling=self.ctx.sampling,
                    max_new_tokens=budget - len(out.response_ids),
                    seed=turn_seed(row.seed, counts["assistant"]),
                    stop_token_ids=self.ctx.stop_token_ids,
                    request_id=f"{row.index}-{counts['assistant']}",
                )
            )
            self._append(out, gen.token_ids, 1, gen.log_probs, turn_versions(self.ctx.engine, gen))
            counts["assistant"] += 1
            if gen.finish_reason == "abort":  # the engine was interrupted: the trajectory is cut here
                counts["aborted"] = 1
                return
            stopped = gen.finish_reason == "stop"
            generated_text = self.chat.decode(gen.token_ids)
            messages.append({"role": "assistant", "content": self.chat.assistant_content(gen.token_ids, stopped)})
            if not stopped or (self.mt.max_assistant_turns and counts["assistant"] >= self.mt.max_assistant_turns):
                return
            new = await self._tool_turn(
                messages[-1]["content"], self.chat.reasoning_open(context), session, out, counts
            )
            if not new:
                if interaction is None or (
                    self.mt.max_user_turns is not None and counts["user"] >= self.mt.max_user_turns
                ):
                    return
                done, text, score, _ = await interaction.generate_response(instance, messages, **interaction_kwargs)
                out.turn_scores.append(float(score))
                if done:
                    return
                counts["user"] += 1
                new = [{"role": "user", "content": str(text)}]
            ids, append_only = self.chat.append_ids(messages, generated_text, new)
            counts["non_append_only"] += int(not append_only)
            if len(ids) >= budget - len(out.response_ids):  # no room left for a model token: end here
                counts["over_budget"] += 1
                return
            messages.extend(new)
            out.num_turns += 1
            self._append(out, ids, 0, None)

    async def _tool_turn(
        self, content: str, in_reasoning: bool, session: Any, out: AgentLoopOutput, counts: dict[str, int]
    ) -> list[dict[str, Any]]:
        """Run the turn's tool calls (concurrently) and return the tool messages ([] = no calls).
        ``in_reasoning``: the turn started inside a ``<think>`` opened by the generation prompt."""
        from verl.tools.parser import parse_tool_calls_ordered

        _, parsed = parse_tool_calls_ordered(
            content, self.ctx.tools, self.mt.max_parallel_calls, in_reasoning=in_reasoning
        )
        if not parsed:
            return []

        async def one(p: Any) -> tuple[str, dict[str, Any]]:
            if p.call is None:  # malformed JSON, unknown tool, bad arguments, over max_parallel_calls
                counts["malformed"] += 1
                text = session.record_error(p.error).response.text or ""
                return text, {"name": None, "arguments": None, "status": "malformed", "error": p.error}
            result = await session.call(p.call)
            return result.response.text or "", {
                "name": p.call.name,
                "arguments": p.call.arguments,
                "status": result.status,
                "reward": float(result.reward),
            }

        done = await asyncio.gather(*(one(p) for p in parsed))  # calls run concurrently, kept in text order
        out.tool_calls += [record for _, record in done]
        return [{"role": "tool", "content": text} for text, _ in done]

    @staticmethod
    def _append(
        out: AgentLoopOutput,
        ids: list[int],
        mask: int,
        log_probs: list[float] | None,
        versions: list[int] | None = None,
    ) -> None:
        """Append a model turn (``mask`` 1, its log-probs and versions) or a tool / user turn
        (``mask`` 0, log-prob 0, version -1: no policy sampled it)."""
        out.response_ids += list(ids)
        out.response_mask += [mask] * len(ids)
        out.response_logprobs += list(log_probs) if log_probs is not None else [0.0] * len(ids)
        out.response_versions += list(versions) if versions is not None else [-1] * len(ids)
        out.num_turns += int(mask == 1)
