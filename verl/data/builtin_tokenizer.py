"""The built-in character tokenizer (``builtin://tiny-arithmetic``), built in memory.

One token per character (printable ASCII and newline) plus ``<pad>`` = 0, ``<s>`` = 1 (BOS),
``</s>`` = 2 (EOS), ``<unk>`` = 3. Encoding adds no special tokens; the chat template starts with
BOS, so a rendered-then-encoded prompt holds BOS once (known fault B27). The template renders a
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


def _tool_tokenizer() -> Any:
    from verl.data.builtin_tool_tokenizer import build_tool_tokenizer  # imports this module

    return build_tool_tokenizer()


BUILTIN_TOKENIZERS: dict[str, Any] = {"tiny-arithmetic": build_tokenizer, "tiny-calculator": _tool_tokenizer}
# Built-in model name -> builder of its tokenizer.


def load_builtin_tokenizer(name: str = "tiny-arithmetic") -> Any:
    """The tokenizer of built-in model ``name`` (built in memory, no files needed).

    Raises:
        ValueError: For an unknown name (the message lists the valid names).
    """
    if name not in BUILTIN_TOKENIZERS:
        raise ValueError(f"unknown built-in model {name!r}; valid names: {sorted(BUILTIN_TOKENIZERS)}")
    return BUILTIN_TOKENIZERS[name]()
