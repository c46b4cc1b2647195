"""The tokenizer of the built-in tool-calling model ``tiny-calculator``, built in memory.

The built-in character tokenizer (`verl.data.builtin_tokenizer`) plus four plain added tokens —
``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` (ids 100-103;
plain, not special, so decoding keeps them, as in Qwen2.5) — and a tool-aware chat template
(:data:`TOOL_CHAT_TEMPLATE`). For ``tools=[calculator]`` it renders::

    <s>S:calculator\nQ:47*38\nA:<tool_call>{"name": "calculator", "arguments": {"expression":
    "47*38"}}</tool_call></s><tool_response>1786</tool_response>A:1786</s>

i.e. the tool names after ``S:``, user turns ``Q:<content>\n``, assistant turns
``A:<content><tool calls></s>`` (a structured ``tool_calls`` list is written in the Hermes JSON
of `verl.tools.parser.render_tool_call`, without its newlines), tool turns
``<tool_response><content></tool_response>`` and the generation prompt ``A:``. It lives with
the data, like the built-in tokenizer, so datasets and workers can load it without the model
package (`verl.modules.builtin_tool_model` saves it next to the weights).
"""

from __future__ import annotations

from typing import Any

from verl.data.builtin_tokenizer import build_tokenizer

__all__ = ["TOOL_CHAT_TEMPLATE", "TOOL_TOKENS", "build_tool_tokenizer"]

TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TOOL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}S:{% for t in tools %}{% set f = t.function if t.function is defined else t %}"
    "{{ f.name }}{% if not loop.last %},{% endif %}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}A:{{ m.content or '' }}"
    "{% for c in (m.tool_calls or []) %}{% set f = c.function if c.function is defined else c %}"
    '<tool_call>{"name": "{{ f.name }}", "arguments": '
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}{{ eos_token }}"
    "{% elif m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response>"
    "{% elif m.role == 'system' %}S:{{ m.content }}\n"
    "{% else %}Q:{{ m.content }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}"
)


def build_tool_tokenizer() -> Any:
    """Character tokenizer + the four tool tokens + :data:`TOOL_CHAT_TEMPLATE` (vocabulary 104)."""
    tok = build_tokenizer()
    tok.add_tokens(TOOL_TOKENS)  # plain added tokens: matched whole, kept by decode
    tok.chat_template = TOOL_CHAT_TEMPLATE
    return tok
