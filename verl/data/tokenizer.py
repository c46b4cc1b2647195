"""`load_tokenizer`: the one way a tokenizer is loaded (data, workers, merge, CLI).

Lives with the data (the bottom layer) so that datasets, model factories and rollout workers all
get the same object: a ``builtin://NAME`` tokenizer is built in memory
(`verl.data.builtin_tokenizer`), anything else is ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
BUILTIN_SCHEME = "builtin://"
_warned_pad: set[str] = set()


def load_tokenizer(path: str | Path, trust_remote_code: bool = False) -> Any:
    """Load a tokenizer for RL: left padding, and a pad token even if the tokenizer has none.

    A missing pad token is set to the eos token (as TRL and verl do), logged once per tokenizer.
    That is safe in verl because no mask is ever derived from token values: attention masks come
    from padding positions and response masks from generated lengths, so
    pad == eos never hides a real EOS.

    Args:
        path: tokenizer directory, hub id or ``builtin://NAME``.
        trust_remote_code: allow custom tokenizer code from the directory.

    Returns:
        The tokenizer with ``padding_side == "left"`` and a non-None ``pad_token_id``.

    Raises:
        ValueError: an unknown built-in name, or a tokenizer with neither pad nor eos token.
    """
    path = str(path)
    if path.startswith(BUILTIN_SCHEME):
        from verl.data.builtin_tokenizer import load_builtin_tokenizer

        tokenizer = load_builtin_tokenizer(path[len(BUILTIN_SCHEME) :])
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer at {path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
        if path not in _warned_pad:
            _warned_pad.add(path)
            logger.warning("tokenizer at %s has no pad token: using its eos token %r as pad", path, tokenizer.eos_token)
    tokenizer.padding_side = "left"
    return tokenizer
