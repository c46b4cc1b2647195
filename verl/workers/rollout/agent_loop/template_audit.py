"""Start-up audit of a chat template: what it writes at each turn boundary of a multi-turn trajectory.

Run once per (template, tools) and process when a multi-turn rollout is built
(``multi_turn.template_audit``). It renders a synthetic conversation (system prompt, user,
assistant with a ``<think>`` block and a tool call, tool, assistant, user) one turn at a time
and reports, one line each:

* the system prompt: what the template writes before the first user turn with and without one
  (a default system prompt it inserts on its own);
* the generation prompt (``add_generation_prompt=True``);
* every boundary (user -> assistant, assistant -> tool, tool -> assistant, assistant -> user):
  the text the next turn appends, or "NOT append-only" with the first differing characters
  when adding the turn re-renders earlier ones (such turns drift from the trained ids,
  `verl.workers.rollout.agent_loop.drift`);
* ``<think>`` handling: whether an earlier assistant turn's reasoning is kept or stripped once a
  later user turn follows;
* the assistant turn end (what follows the model's own text).
"""

from __future__ import annotations

from typing import Any

from verl.workers.rollout.agent_loop.chat import ChatTemplate

__all__ = ["audit_template", "log_template_audit"]

_SYSTEM = {"role": "system", "content": "You are a careful assistant."}
_USER = {"role": "user", "content": "What is 2+3?"}
_THINK = "<think>\nadd the two numbers\n</think>\n\n"
_CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "2+3"}}\n</tool_call>'
_CONVERSATION = [
    _SYSTEM,
    _USER,
    {"role": "assistant", "content": _THINK + _CALL},
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "The answer is 5."},
    {"role": "user", "content": "And 3+4?"},
]
_AUDITED: set[tuple[str, str]] = set()


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2 :])


def _boundary(chat: ChatTemplate, k: int) -> str:
    """The line for adding turn ``k`` of the synthetic conversation to the turns before it."""
    before, after = _CONVERSATION[:k], _CONVERSATION[: k + 1]
    label = f"{before[-1]['role']} -> {after[-1]['role']}"
    prev, full = chat.render(before, False), chat.render(after, False)
    if full.startswith(prev):
        return f"{label}: appends {_short(full[len(prev) :])}"
    pos = next((i for i, (a, b) in enumerate(zip(prev, full)) if a != b), min(len(prev), len(full)))
    return (
        f"{label}: NOT append-only (earlier turns re-rendered from char {pos}: "
        f"{_short(prev[pos : pos + 40])} becomes {_short(full[pos : pos + 40])}); "
        "trained ids will drift from re-renderings"
    )


def audit_template(
    tokenizer: Any, tools: list[dict[str, Any]] | None = None, template_kwargs: dict[str, Any] | None = None
) -> list[str]:
    """The audit's lines (module docstring) for ``tokenizer``'s chat template with ``tools``."""
    chat = ChatTemplate(tokenizer, tools, template_kwargs)
    lines = []
    with_system, without = chat.render(_CONVERSATION[:2], False), chat.render([_USER], False)
    lines.append(f"system prompt given: written as {_short(with_system[: with_system.find(_USER['content'])])}")
    head = without[: without.find(_USER["content"])]
    lines.append(f"no system prompt: the template writes {_short(head)} before the first user turn")
    gen = chat.render([_USER], True)
    lines.append(
        "generation prompt: "
        f"{_short(gen[len(without) :]) if gen.startswith(without) else 'not an append: ' + _short(gen)}"
    )
    lines += [_boundary(chat, k) for k in range(2, len(_CONVERSATION))]
    final = chat.render(_CONVERSATION, False)
    kept = _THINK.strip() in final
    lines.append(
        "<think> of an earlier assistant turn: "
        + (
            "kept when later turns follow"
            if kept
            else "STRIPPED once a later user turn follows (the trained ids keep what the model sampled: drift)"
        )
    )
    lines.append(f"assistant turn end: {_short(chat.turn_end())}")
    return lines


def log_template_audit(
    tokenizer: Any, tools: list[dict[str, Any]] | None = None, template_kwargs: dict[str, Any] | None = None
) -> list[str]:
    """Print `audit_template`'s lines once per template and tools in this process; returns them ([] if done before)."""
    key = (str(getattr(tokenizer, "chat_template", "")), repr(tools) + repr(sorted((template_kwargs or {}).items())))
    if key in _AUDITED:
        return []
    _AUDITED.add(key)
    lines = audit_template(tokenizer, tools, template_kwargs)
    for line in lines:
        print(f"[chat template audit] {line}", flush=True)
    return lines
