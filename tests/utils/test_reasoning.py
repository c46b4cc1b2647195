"""strip_reasoning: closed blocks, a block opened by the prompt, an unclosed block, idempotence."""

from __future__ import annotations

import pytest

from verl.utils.reasoning import strip_reasoning


@pytest.mark.parametrize(
    "text, answer",
    [
        ("no tags at all", "no tags at all"),
        ('<think>{"a": 1}</think>{"a": 2}', '{"a": 2}'),
        ("a<think>b</think>c<think>d</think>e", "a c e"),  # repeated blocks; pieces never fuse
        ("4<think>x</think>2", "4 2"),
        ("draft #### 3</think> #### 7", " #### 7"),  # the prompt opened the block
        ("<think>a</think>b</think>c", "c"),  # a stray end: all before it was reasoning
        ("answer first <think>cut at the length limit #### 7", "answer first "),
        ("<think>#### 7", ""),
        ("<think></think>", ""),
        ("", ""),
        ("<THINK>kept</THINK>", "<THINK>kept</THINK>"),  # tags are case-sensitive
    ],
)
def test_strip_reasoning(text, answer):
    assert strip_reasoning(text) == answer
    assert strip_reasoning(answer) == answer  # stripping twice changes nothing


def test_strip_reasoning_custom_tags():
    assert strip_reasoning("<reasoning>x</reasoning>y", "<reasoning>", "</reasoning>") == "y"
