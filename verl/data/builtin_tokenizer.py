"""The built-in character tokenizer (``builtin://tiny-arithmetic``), built in memory.

One token per character (printable ASCII and newline) plus ``<pad>`` = 0, ``<s>`` = 1 (BOS),
``</s>`` = 2 (EOS), ``<unk>`` = 3. Encoding adds no special tokens; the chat template starts with
BOS, so a rendered-then-encoded prompt holds BOS once. The template renders a
user turn as ``"Q:<content>\\n"``, an assistant turn as ``"A:<content></s>"`` and the generation
prompt as ``"A:"``. It lives with the data because the built-in tasks are written for it; the
built-in *model* (`verl.modules.builtin`) saves this same tokenizer next to its weights.
"""

from __future__ import annotations

import string
from typing import Any

__all__ = ["BUILTIN_TOKENIZERS", "CHAT_TEMPLATE", "build_tokenizer", "load_builtin_tokenizer"]

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
# Printable ASCII (digits, letters, punctuation, space) and newline: ids 4..99.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "A:{{ m['content'] }}{{ eos_token }}{% else %}Q:{{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}"
)


def build_tokenizer() -> Any:
    """The built-in character tokenizer (a `transformers.PreTrainedTokenizerFast`).

    Returns:
        Tokenizer with vocabulary size 100, pad/bos/eos/unk ids 0/1/2/3 and `CHAT_TEMPLATE`;
        e.g. ``"12+3"`` encodes to ``[5, 6, 76, 7]`` and decodes back to ``"12+3"``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *CHARS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # Every character (newline included) is its own pre-token; Fuse joins them back without spaces.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK)
    tok.chat_template = CHAT_TEMPLATE
    return tok


# ---- the tool-calling variant (built-in calculator task) ----
# The tokenizer of the built-in tool-calling model ``tiny-calculator``, built in memory.
#
# The built-in character tokenizer (`verl.data.builtin_tokenizer`) plus four plain added tokens —
# ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` (ids 100-103;
# plain, not special, so decoding keeps them, as in Qwen2.5) — and a tool-aware chat template
# (:data:`TOOL_CHAT_TEMPLATE`). For ``tools=[calculator]`` it renders::
#
#     <s>S:calculator\nQ:47*38\nA:<tool_call>{"name": "calculator", "arguments": {"expression":
#     "47*38"}}</tool_call></s><tool_response>1786</tool_response>A:1786</s>
#
# i.e. the tool names after ``S:``, user turns ``Q:<content>\n``, assistant turns
# ``A:<content><tool calls></s>`` (a structured ``tool_calls`` list is written in the Hermes JSON
# of `verl.tools.parser.render_tool_call`, without its newlines), tool turns
# ``<tool_response><content></tool_response>`` and the generation prompt ``A:``. It lives with
# the data, like the built-in tokenizer, so datasets and workers can load it without the model
# package (`verl.recipes.tiny_calculator` saves it next to the weights).

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


BUILTIN_TOKENIZERS: dict[str, Any] = {
    "tiny-arithmetic": build_tokenizer,
    "tiny-calculator": lambda: build_tool_tokenizer(),
}
# Built-in model name -> builder of its tokenizer.


def load_builtin_tokenizer(name: str = "tiny-arithmetic") -> Any:
    """The tokenizer of built-in model ``name`` (built in memory, no files needed).

    Raises:
        ValueError: For an unknown name (the message lists the valid names).
    """
    if name not in BUILTIN_TOKENIZERS:
        raise ValueError(f"unknown built-in model {name!r}; valid names: {sorted(BUILTIN_TOKENIZERS)}")
    return BUILTIN_TOKENIZERS[name]()
