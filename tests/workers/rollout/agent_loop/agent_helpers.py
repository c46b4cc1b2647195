"""Shared pieces of the agent-loop tests: a scripted token engine and small test tools."""

from __future__ import annotations

import asyncio
from typing import Any

from verl.config.schema import MultiTurnConfig, RolloutConfig
from verl.tools.base import BaseInteraction, BaseTool, ToolResponse
from verl.workers.rollout.agent_loop import AgentContext, AgentRow
from verl.workers.rollout.request import TokenOutput, TokenRequest
from verl.workers.rollout.sampling import SamplingParams

QWEN = "/work/shared/tokenizers/qwen2.5"
IM_END = 151645


def qwen_tokenizer() -> Any:
    import os

    from transformers import AutoTokenizer

    shared = os.environ.get("VERL_SHARED_DIR", "/work/shared")
    return AutoTokenizer.from_pretrained(f"{shared}/tokenizers/qwen2.5")


class ScriptedEngine:
    """An `AsyncTokenEngine` that answers turn k with ``encode(turns[k]) + [<|im_end|>]`` and
    log-probs ``-(k + 1) / 10 - j / 1000`` (distinct per token), cut to ``max_new_tokens``."""

    def __init__(self, tokenizer: Any, turns: list[str], stop: bool = True) -> None:
        self.tok, self.turns, self.stop = tokenizer, turns, stop
        self.requests: list[TokenRequest] = []
        self.pad_token_id, self.eos_token_id = tokenizer.pad_token_id, [IM_END]

    async def generate(self, request: TokenRequest) -> TokenOutput:
        k = len(self.requests)
        self.requests.append(request)
        ids = self.tok(self.turns[k], add_special_tokens=False)["input_ids"] + ([IM_END] if self.stop else [])
        cut = ids[: request.max_new_tokens]
        logp = [-(k + 1) / 10 - j / 1000 for j in range(len(cut))]
        finished = "stop" if self.stop and len(cut) == len(ids) else "length"
        return TokenOutput(token_ids=cut, log_probs=logp, finish_reason=finished)


class EchoTool(BaseTool):
    """Returns ``config["reply"]`` (default: the ``text`` argument); raises when asked to."""

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: dict[str, Any] | None = None) -> None:
        super().__init__(
            config or {},
            tool_schema
            or {
                "type": "function",
                "function": {
                    "name": "echo",
                    "description": "Echo text.",
                    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                },
            },
        )

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        if parameters["text"] == "raise":
            raise RuntimeError("boom")
        if parameters["text"] == "sleep":
            await asyncio.sleep(60)
        return ToolResponse(text=self.config.get("reply", parameters["text"])), 0.0, {}


class RetryOnceInteraction(BaseInteraction):
    """Asks for a retry after the first assistant turn, then ends the conversation."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__({"name": "retry", **(config or {})})
        self.calls: dict[str, int] = {}

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict]:
        self.calls[instance_id] = calls = self.calls.get(instance_id, 0) + 1
        return (calls > 1, "Try again.", float(calls - 1), {})


def context(
    tokenizer: Any,
    engine: Any,
    tools: dict[str, Any] | None = None,
    interactions: dict[str, Any] | None = None,
    response_length: int = 256,
    **multi_turn: Any,
) -> AgentContext:
    multi_turn.setdefault("enable", True)
    multi_turn.setdefault("tool_config_path", "unused.yaml")
    cfg = RolloutConfig(response_length=response_length, prompt_length=512, multi_turn=MultiTurnConfig(**multi_turn))
    return AgentContext(
        engine=engine,
        tokenizer=tokenizer,
        config=cfg,
        sampling=SamplingParams(),
        response_length=response_length,
        tools=tools or {},
        interactions=interactions or {},
    )


def row(question: str = "What is 2+3?", **extra: Any) -> AgentRow:
    return AgentRow(prompt_ids=[], messages=[{"role": "user", "content": question}], extra_info=dict(extra), seed=5)


def thinking_tokenizer(strip_earlier_reasoning: bool = True, open_think: bool = False) -> Any:
    """The Qwen2.5 tokenizer with a Qwen3-style template: ``strip_earlier_reasoning`` drops the
    ``<think>…</think>`` of assistant turns before the last user turn (not append-only: a user
    turn re-renders the assistant turn before it); ``open_think`` ends the generation prompt with
    ``<think>\\n`` (the model's turn starts inside reasoning)."""
    tok = qwen_tokenizer()
    template = tok.chat_template
    loop = "{%- for message in loop_messages %}"
    if strip_earlier_reasoning:
        other = "{%- else %}\n{{- '<|im_start|>' + message['role']"
        last_user = (
            "{%- set ns = namespace(last_user=-1) %}{%- for m in loop_messages %}"
            "{%- if m['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}\n"
        )
        strip = (
            r"{%- elif message['role'] == 'assistant' and loop.index0 < ns.last_user"
            r" and '</think>' in message['content'] %}"
            "\n"
            r"{{- '<|im_start|>assistant\n' + message['content'].split('</think>')[-1].lstrip('\n')"
            r" + '<|im_end|>\n' }}"
            "\n" + other
        )
        assert template.count(loop) == 1 and template.count(other) == 1
        template = template.replace(loop, last_user + loop).replace(other, strip)
    if open_think:
        gen = r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
        assert gen in template
        template = template.replace(gen, gen.replace(r"assistant\n'", r"assistant\n<think>\n'"))
    tok.chat_template = template
    return tok
