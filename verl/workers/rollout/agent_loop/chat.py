"""Incremental chat-template tokenization for multi-turn rollouts, and its sanity check.

A trajectory's ids are built turn by turn (verl's "continuous token" idea): the prompt is the
template's rendering of the messages (with ``tools=``) plus the generation prompt; each
assistant turn appends exactly the ids the model sampled, never re-rendered; each tool / user
turn appends the ids of the text the template adds for it. That text is found by rendering twice
and taking the difference, so no template-specific marker is hard-coded:

    prev = render(messages ending with the assistant turn, add_generation_prompt=False)
    full = render(messages + new turns,                    add_generation_prompt=True)
    appended text = closing + full[len(prev):]

where ``closing`` is what the template writes after the model's own text to finish the
assistant turn (``"\\n"`` after ``<|im_end|>`` for ChatML; ``"<|im_end|>\\n"`` when the model was
cut off before its stop token). Only model-sampled ids get ``response_mask`` = 1.

A template that is not append-only (Qwen3 drops the ``<think>`` block of earlier assistant turns
once a user turn follows; others re-render earlier turns) makes ``full`` disagree with ``prev``.
The new turns are then rendered after a fixed probe conversation instead (one user and one
assistant message of plain text, which such templates leave alone), and only that difference is
appended; the template's rendering of the whole conversation then differs from the trajectory's
ids, which `sanity_check` reports for the row (training uses the ids the model saw).

`sanity_check` then compares the incremental ids with the template's rendering of the final
conversation (``multi_turn.tokenization_sanity_check_mode``): ``strict`` needs the incremental
ids to be a prefix of the rendering id for id (the rendering may only add the closing of the last
assistant turn); ``ignore_strippable`` compares after dropping tokens that decode to whitespace
only; ``disable`` skips it. A mismatch is reported with the first differing position (a model
that samples a non-canonical tokenization of its own text, e.g. a random model, mismatches;
training still uses the sampled ids, as verl does).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["ChatTemplate", "TokenizationMismatch", "first_difference"]

logger = logging.getLogger(__name__)
SANITY_MODES = ("strict", "ignore_strippable", "disable")


_PROBE_USER = {"role": "user", "content": "continuous token probe"}
_PROBE_TEXT = "continuous token probe reply"


class TokenizationMismatch(ValueError):
    """The template cannot render a turn as an appended difference (not even after a probe)."""


def first_difference(a: list[int], b: list[int]) -> int:
    """Index of the first position where ``a`` and ``b`` differ (``min(len)`` when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


class ChatTemplate:
    """Renders and encodes conversations with a tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tools: OpenAI function schemas passed as ``apply_chat_template(..., tools=tools)``.
        template_kwargs: extra ``apply_chat_template`` keywords (``data.apply_chat_template_kwargs``).

    Raises:
        ValueError: ``tools`` given but the template renders the same text with and without them
            (it ignores tools, so the model would never see the schemas).
    """

    def __init__(
        self, tokenizer: Any, tools: list[dict[str, Any]] | None = None, template_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.template_kwargs = dict(template_kwargs or {})
        self._turn_end: str | None = None
        if self.tools:
            probe = [{"role": "user", "content": "hi"}]
            if self.render(probe, True) == self._render(probe, True, None):
                raise ValueError(
                    "the tokenizer's chat template ignores `tools`, so the model would never see the tool "
                    "schemas; use a tokenizer whose template renders tools (Hermes / Qwen2.5 format, e.g. "
                    "Qwen/Qwen2.5-*-Instruct) or set actor_rollout_ref.model.custom_chat_template to one that does"
                )

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, tools: Any) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **self.template_kwargs
        )

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (with this template's tools)."""
        return self._render(messages, add_generation_prompt, self.tools)

    def encode(self, text: str) -> list[int]:
        """Ids of rendered text, with no special tokens added (the template holds them)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """Text of ids, special tokens kept (the template's view of the model's output)."""
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of the prompt: rendering with the generation prompt."""
        return self.encode(self.render(messages, True))

    def assistant_content(self, generated_ids: list[int], stopped: bool) -> str:
        """The assistant message content of a model turn: its text without the final stop token."""
        ids = generated_ids[:-1] if stopped and generated_ids else generated_ids
        return self.decode(ids)

    def reasoning_open(self, ids: list[int]) -> bool:
        """Whether the context ``ids`` ends inside a ``<think>`` the template opened (its generation
        prompt ends with ``<think>``, as DeepSeek-R1 and some Qwen3 templates write it)."""
        return self.decode(list(ids[-4:])).rstrip().endswith("<think>")

    def turn_end(self) -> str:
        """What the template writes after an assistant message's text (``"<|im_end|>\\n"`` for
        ChatML), read from a probe conversation."""
        if self._turn_end is None:
            text = self.render([_PROBE_USER, {"role": "assistant", "content": _PROBE_TEXT}], False)
            self._turn_end = text[text.rindex(_PROBE_TEXT) + len(_PROBE_TEXT) :] if _PROBE_TEXT in text else ""
        return self._turn_end

    def closing(self, generated_text: str) -> str:
        """The part of `turn_end` the model did not write itself (``"\\n"`` after a sampled
        ``<|im_end|>``; all of it when the model stopped on another stop token)."""
        end = self.turn_end()
        k = next(k for k in range(len(end), -1, -1) if generated_text.endswith(end[:k]))
        return end[k:]

    def append_ids(
        self, messages: list[dict[str, Any]], generated_text: str, new: list[dict[str, Any]]
    ) -> tuple[list[int], bool]:
        """Ids to append after an assistant turn for the ``new`` tool / user messages.

        Args:
            messages: the conversation ending with the assistant message of the last turn.
            generated_text: the decoded ids the model sampled in that turn (stop token included).
            new: the tool / user messages that follow.

        Returns:
            ``(ids, append_only)``: the ids of the closing of the assistant turn + the new turns +
            the generation prompt, and whether the template rendered the conversation append-only
            (False: the ids come from the probe conversation, see the module docstring).

        Raises:
            TokenizationMismatch: the new turns do not render as an appended difference even
                after the probe conversation.
        """
        base = self.render(messages[:-1], True)
        prev = self.render(messages, False)
        full = self.render(messages + new, True)
        if prev.startswith(base) and full.startswith(prev):
            span = prev[len(base) :]  # the assistant turn as the template writes it
            closing = span[len(generated_text) :] if span.startswith(generated_text) else self.closing(generated_text)
            return self.encode(closing + full[len(prev) :]), True
        probe = [_PROBE_USER, {"role": "assistant", "content": _PROBE_TEXT}]
        prev, full = self.render(probe, False), self.render(probe + new, True)
        if not full.startswith(prev):
            raise TokenizationMismatch(
                f"the chat template renders the {'/'.join(m['role'] for m in new)} turn differently depending on "
                "the turns before it, even after a plain-text probe conversation, so it cannot be appended"
            )
        return self.encode(self.closing(generated_text) + full[len(prev) :]), False

    def sanity_check(self, ids: list[int], messages: list[dict[str, Any]], mode: str) -> str | None:
        """Compare incremental ``ids`` (prompt + response) with the rendering of ``messages``.

        Returns:
            None when they agree (or ``mode`` is ``disable``), else a one-line description with
            the first differing position (also logged as a warning).

        Raises:
            ValueError: unknown ``mode``.
        """
        if mode not in SANITY_MODES:
            raise ValueError(f"tokenization_sanity_check_mode must be one of {SANITY_MODES}, got {mode!r}")
        if mode == "disable":
            return None
        expected = self.encode(self.render(messages, messages[-1]["role"] != "assistant"))
        got = list(ids)
        if mode == "ignore_strippable":
            keep = lambda seq: [t for t in seq if self.decode([t]).strip()]  # noqa: E731
            got, expected = keep(got), keep(expected)
        pos = first_difference(got, expected)
        if pos >= len(got):
            return None  # a prefix: the rendering only adds the closing of the last assistant turn
        msg = (
            f"tokenization mismatch ({mode}) at position {pos}: incremental id {got[pos]} "
            f"({self.decode([got[pos]])!r}) vs template id "
            + (f"{expected[pos]} ({self.decode([expected[pos]])!r})" if pos < len(expected) else "<end>")
        )
        logger.warning(msg)
        return msg
