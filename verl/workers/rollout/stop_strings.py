"""Stop strings on token ids (``rollout.stop``, ``rollout.include_stop_str_in_output``), as vLLM's.

vLLM's ``SamplingParams.stop`` ends a response as soon as its decoded text contains one of the
strings; ``include_stop_str_in_output`` keeps the stop text or removes it. The rollout works on
token ids, so the cut is made on tokens:

- the response ends at the first token after which the decoded text contains a stop string (the
  first string *completed* wins; of several completed by the same token, the one starting first);
- kept (``include_stop_str_in_output=True``): the response is those tokens, the stop text
  included, ending on the token that completed it;
- removed (False): the response is the longest prefix whose text ends at or before the stop
  text's first character. A token that straddles the boundary (part text before the stop, part
  stop) is dropped with the stop, so the text of the response may end a few characters early;
  the response may be empty (mask all 0) when the stop starts in its first token.

Text is ``tokenizer.decode(ids, skip_special_tokens=True)`` (vLLM's default detokenisation),
response tokens only (never the prompt). The hf engine checks each running row after every token
on the decoded last few tokens (`window`) and cuts exactly once one matches; the vLLM engine cuts
its finished outputs the same way, so both engines return the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["StopStrings", "stop_strings_of"]


class StopStrings:
    """The stop strings of one rollout section, with the tokenizer that decodes responses.

    Args:
        stop: the strings (each non-empty).
        include_stop_str_in_output: keep the stop text in the response (else cut before it).
        decode: token ids -> text.

    Raises:
        ValueError: an empty or non-string stop entry.
    """

    def __init__(
        self, stop: Sequence[str], include_stop_str_in_output: bool, decode: Callable[[list[int]], str]
    ) -> None:
        bad = [s for s in stop if not isinstance(s, str) or not s]
        if bad or not stop:
            raise ValueError(f"actor_rollout_ref.rollout.stop must be a list of non-empty strings, got {list(stop)!r}")
        self.stop, self.include, self.decode = list(stop), bool(include_stop_str_in_output), decode
        # enough trailing tokens to hold the longest stop string even when some tokens decode to
        # nothing (skipped special tokens) or to a partial character
        self.window = 2 * max(len(s) for s in self.stop) + 8

    def _first(self, text: str) -> int | None:
        """Start of the earliest stop string in ``text`` (None when there is none)."""
        starts = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        return min(starts) if starts else None

    def may_stop(self, tail: list[int]) -> bool:
        """Whether the text of the last ``window`` tokens contains a stop string (cheap pre-check)."""
        return self._first(self.decode(tail[-self.window :])) is not None

    def cut(self, ids: list[int]) -> int | None:
        """Length of the response ``ids`` cut at its first stop string, or None when it has none.

        Both boundaries are found by bisection over prefix decodes (O(log n) decodes), since
        "the prefix's text contains a stop string" and "the prefix's text ends before the stop"
        are monotone in the prefix length.
        """
        if self._first(self.decode(ids)) is None:
            return None
        lo, hi = 1, len(ids)  # smallest n whose text holds a stop string: the token that completes it
        while lo < hi:
            mid = (lo + hi) // 2
            if self._first(self.decode(ids[:mid])) is not None:
                hi = mid
            else:
                lo = mid + 1
        completed = lo
        if self.include:
            return completed
        start = self._first(self.decode(ids[:completed]))
        assert start is not None
        lo, hi = 0, completed - 1  # largest n whose text ends at or before the stop's first character
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(self.decode(ids[:mid])) <= start:
                lo = mid
            else:
                hi = mid - 1
        return lo


def stop_strings_of(config: Any, tokenizer: Any) -> StopStrings | None:
    """`StopStrings` of a rollout section (None when ``rollout.stop`` is empty).

    Raises:
        ValueError: stop strings without a tokenizer to decode the responses, or a bad entry.
    """
    stop = list(getattr(config, "stop", None) or [])
    if not stop:
        return None
    if tokenizer is None:
        raise ValueError(
            "actor_rollout_ref.rollout.stop needs the actor's tokenizer to decode responses; none was given"
        )
    return StopStrings(
        stop, bool(config.include_stop_str_in_output), lambda ids: tokenizer.decode(ids, skip_special_tokens=True)
    )
