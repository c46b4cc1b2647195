"""Property-based round trip of the Hermes tool-call scanner (`verl.tools.parser`).

Each generated turn mixes valid calls (arbitrary JSON arguments whose strings hold the format's
own tags, quotes, backslashes, control characters and non-ASCII text; random JSON layout, key
order and whitespace around the body), malformed calls of eight kinds, plain text with stray
end tags, and ``<think>`` blocks holding draft calls (closed, or left open at the end of the
turn). Every valid call outside reasoning must come back exactly and in order, every malformed
call is reported (at least one error per run of malformed calls between two valid ones: a cut
string may end at a quote of the next broken call, which makes both one block), drafts give
nothing, and a turn without malformed calls keeps exactly its non-call text as content.

One generator, two sources of choices: `hypothesis` (edge-case bias and shrinking, 200 turns)
and a seeded `random.Random` (fast, at least 10,000 calls); the test counts the calls of both.

Generator limits (documented limits of the scanner, not skipped cases): reasoning text holds no
``</think>`` (a reasoning block ends at its first ``</think>``), and the text of a call whose JSON
is broken (cut or mis-quoted) holds no ``<think>`` (such a block may end there).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl.tools import FunctionCall, parse_tool_calls
from verl.tools.base import BaseTool

TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>", '"', "\\", "\n", "{", "}", "[", "]", ":", ",", "'"]
NAMES = ["echo", "lookup"]
POOL = "abz 09_-.\t\x00\x1f\x7fé中😀\u2028\\\"'{}[]:,<>/"
KINDS = ["cut", "noclose", "garbage", "notdict", "noname", "unknown", "badargs", "quotes"]
MIN_CALLS = 10_000


class AnyArgsTool(BaseTool):
    """A tool whose arguments may be any JSON object."""

    def __init__(self, name: str) -> None:
        super().__init__(
            {}, {"type": "function", "function": {"name": name, "description": "x", "parameters": {"type": "object"}}}
        )


TOOLS = {n: AnyArgsTool(n) for n in NAMES}


class RandomSource:
    """Choices from a seeded `random.Random`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def chars(self, n: int, plain: bool = False) -> str:
        pool = POOL.replace("<", "") if plain else POOL
        return "".join(self.rng.choice(pool) for _ in range(self.rng.randint(0, n)))

    def number(self) -> Any:
        return self.rng.choice([self.rng.randint(-(10**20), 10**20), self.rng.uniform(-1e6, 1e6), 0, -0.0, 1e-300])


class HypothesisSource:
    """Choices drawn by `hypothesis` (``st.data()``)."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def pick(self, options: list[Any]) -> Any:
        return self.data.draw(st.sampled_from(options))

    def chars(self, n: int, plain: bool = False) -> str:
        alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters="<" if plain else "")
        return self.data.draw(st.text(alphabet=alphabet, max_size=n))

    def number(self) -> Any:
        return self.data.draw(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))


def string(src: Any) -> str:
    return "".join(src.chars(5) if src.int(0, 2) else src.pick(TAGS) for _ in range(src.int(0, 4)))


def value(src: Any, depth: int = 0) -> Any:
    kind = src.int(0, 6 if depth < 2 else 4)
    if kind == 0:
        return src.pick([None, True, False])
    if kind in (1, 2):
        return src.number()
    if kind in (3, 4):
        return string(src)
    if kind == 5:
        return [value(src, depth + 1) for _ in range(src.int(0, 3))]
    return {string(src): value(src, depth + 1) for _ in range(src.int(0, 3))}


def space(src: Any) -> str:
    return "".join(src.pick([" ", "\t", "\n", "\r"]) for _ in range(src.int(0, 3)))


def filler(src: Any) -> str:
    """Plain text: no '<' except whole stray end tags, so no tag can form across segments."""
    return "".join(
        src.chars(8, plain=True) if src.int(0, 3) else src.pick(["</tool_call>", "</think>"])
        for _ in range(src.int(0, 3))
    )


def rendered_call(src: Any) -> tuple[str, FunctionCall]:
    """``(body JSON text, call)`` of a valid call with a random layout."""
    name = src.pick(NAMES)
    args = {string(src): value(src) for _ in range(src.int(0, 3))}
    obj = {"name": name, "arguments": args} if src.int(0, 1) else {"arguments": args, "name": name}
    body = json.dumps(obj, ensure_ascii=bool(src.int(0, 1)), indent=src.pick([None, 0, 2]))
    return body, FunctionCall(name, args)


def block(src: Any, body: str, close: bool = True) -> str:
    return "<tool_call>" + space(src) + body + space(src) + ("</tool_call>" if close else "")


def malformed(src: Any) -> str:
    """Text of one malformed call, of a kind in `KINDS`."""
    body, _ = rendered_call(src)
    kind = src.pick(KINDS)
    if kind in ("cut", "quotes"):  # broken JSON: see the generator limits above
        body = body.replace("<think>", "<thinx>")
    if kind == "cut":  # a proper prefix of a JSON object is never a complete value
        return block(src, body[: src.int(0, len(body) - 1)])
    if kind == "noclose":
        return block(src, body, close=False)
    if kind == "garbage":
        return block(src, body + space(src) + src.pick(["}", ",", "x", "]", '"a"', "{}", "<x>"]))
    if kind == "notdict":
        return block(src, json.dumps(src.pick([[value(src)], string(src), src.number()])))
    if kind == "noname":
        return block(src, json.dumps({**src.pick([{}, {"name": 3}, {"name": None}]), "arguments": {}}))
    if kind == "unknown":
        return block(src, json.dumps({"name": "no_" + string(src), "arguments": {}}))
    if kind == "badargs":
        return block(src, json.dumps({"name": src.pick(NAMES), "arguments": src.pick([[1], 7, "{oops", None])}))
    return block(src, body.replace('"', "'", 1))  # a single-quoted key


def reasoning(src: Any, closed: bool = True) -> tuple[str, int]:
    """``(text, number of drafts)``: a ``<think>`` block with draft calls (which must not run)."""
    parts = []
    for _ in range(src.int(0, 2)):
        parts += [filler(src), block(src, rendered_call(src)[0]) if src.int(0, 1) else malformed(src)]
    text = ("".join(parts) + filler(src)).replace("</think>", "</thinks>")
    return "<think>" + text + ("</think>" if closed else ""), len(parts) // 2


def turn(src: Any) -> tuple[str, list[FunctionCall], int, int, str | None, int]:
    """``(text, valid calls, malformed calls, groups of malformed calls, expected content or None,
    drafts)``; a group is a run of malformed calls with no valid call between them."""
    pieces, calls, bad, groups, drafts, content = [], [], 0, 0, 0, []
    in_group = False
    for _ in range(src.int(1, 12)):
        kind = src.pick(["valid"] * 6 + ["malformed", "filler", "think"])
        if kind == "valid":
            body, call = rendered_call(src)
            pieces.append(block(src, body))
            calls.append(call)
            in_group = False
        elif kind == "malformed":
            pieces.append(malformed(src))
            bad += 1
            groups += 0 if in_group else 1
            in_group = True
        else:
            text, n = reasoning(src) if kind == "think" else (filler(src), 0)
            if pieces and not pieces[-1].endswith("</tool_call>") and re.match(r"\s*</tool_call>", text):
                text = "." + text  # a stray end tag right after an unclosed call would close it
            pieces.append(text)
            content.append(text)
            drafts += n
    if src.int(0, 9) == 0:  # cut off while thinking: nothing after the open tag runs
        text, n = reasoning(src, closed=False)
        pieces.append(text)
        content.append(text)
        drafts += n
    return "".join(pieces), calls, bad, groups, ("".join(content) if bad == 0 else None), drafts


def check(src: Any, seen: dict[str, int]) -> None:
    text, expected, bad, groups, content, drafts = turn(src)
    got_content, calls, errors = parse_tool_calls(text, TOOLS, max_parallel_calls=10**6)
    assert calls == expected, text  # every valid call, exactly, in order; no draft ran
    assert len(errors) >= groups and (bad > 0 or errors == []), text
    if content is not None:
        assert got_content == content, text
    seen["valid"] += len(expected)
    seen["malformed"] += bad
    seen["drafts"] += drafts


def test_round_trip_of_generated_turns():
    seen = {"valid": 0, "malformed": 0, "drafts": 0}

    @settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def by_hypothesis(data):
        check(HypothesisSource(data), seen)

    by_hypothesis()
    src = RandomSource(seed=2024)
    while seen["valid"] + seen["malformed"] < MIN_CALLS:
        check(src, seen)
    assert seen["malformed"] >= 1000 and seen["drafts"] >= 1000, seen
