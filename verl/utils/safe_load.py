"""Weights-only ``torch.load`` whose failures are one line naming the file, without torch's advice.

``torch.load(weights_only=True)`` refuses a pickle that references code (a ``GLOBAL`` such as
``posix.system``) without running it, and says so in a message that suggests retrying with
``weights_only=False`` (or allow-listing the global): advice that would run the payload. verl
never relays it: `refusal_reason` keeps only what was refused, `strip_unsafe_advice` removes the
advice from any relayed text, and `safe_torch_load` raises `CheckpointLoadError` naming the file
and the config key that led to it.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

from verl.utils.errors import CheckpointLoadError

__all__ = ["SAFE_FORMATS", "is_refused_pickle", "refusal_reason", "safe_torch_load", "strip_unsafe_advice"]

SAFE_FORMATS = "safetensors (model.safetensors), or a torch zip archive of plain tensors"
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
# what marks a sentence of torch's message that tells the user how to load the file anyway
_ADVICE = (
    "weights_only",
    "safe_globals",
    "trusted source",
    "trust the source",
    "allowlist",
    "check the documentation",
    "in pytorch 2.6",
    "this file can still be loaded",
    "the recommended steps",
    "please file an issue",
)
_FILLER = ("Weights only load failed.", "WeightsUnpickler error:")


def is_refused_pickle(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) is torch's weights-only unpickler refusing a file."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, pickle.UnpicklingError):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def strip_unsafe_advice(text: str) -> str:
    """``text`` without any sentence advising ``weights_only=False`` or allow-listing globals (one line)."""
    sentences = [s for line in text.splitlines() for s in re.split(r"(?<=[.:!?])\s+", line.strip()) if s]
    return " ".join(s for s in sentences if not any(m in s.lower() for m in _ADVICE) and s not in _FILLER)


def refusal_reason(exc: BaseException) -> str:
    """A short reason for a refused or unreadable pickle: the code it references when known."""
    globals_ = sorted(set(_GLOBAL.findall(str(exc))))
    if globals_:
        return f"it is a pickle that references {', '.join(globals_)} (code, not tensors)"
    reason = strip_unsafe_advice(str(exc))
    return f"{type(exc).__name__}: {reason[:200]}" if reason else type(exc).__name__


def safe_torch_load(path: str | Path, key: str, what: str = "state", **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True)``; a file that is not plain tensors is one error line.

    Args:
        path: the file.
        key: the config key that led to the file (e.g. ``trainer.resume_from_path``), for the message.
        what: what the file holds (``optimizer state``), for the message.
        **kwargs: passed to ``torch.load`` (``map_location``, ``mmap``).

    Raises:
        CheckpointLoadError: a pickle that references code (refused, never run), a truncated or
            corrupt file, naming the file and ``key``.
    """
    import torch

    try:
        return torch.load(path, weights_only=True, **kwargs)
    except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, RuntimeError) as e:
        if isinstance(e, RuntimeError) and "PytorchStreamReader" not in str(e) and "zip archive" not in str(e):
            raise
        refused = _GLOBAL.search(str(e)) is not None
        tail = "it was not run: only plain tensors are loaded" if refused else "the file is damaged or not a torch file"
        raise CheckpointLoadError(
            f"cannot load the {what} {path} (reached through {key}): {refusal_reason(e)}; "
            f"{tail}; resume from another checkpoint"
        ) from None
