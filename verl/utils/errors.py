"""The `UserError` family: errors caused by the user's input, printed as one line by the CLI.

Anything that bad input can cause (a config value, a data file, a reward function, a model or
checkpoint directory, a full disk or an unwritable path) is raised as a subclass of `UserError`
at the place where it is detected, with a message that names the file / key / sample at fault.
The command line (`verl.cli`, ``python -m verl.trainer.main_ppo``) catches `UserError` and
prints ``verl <command>: <kind>: <message>`` on one line with a non-zero exit status; every other
exception is a bug in verl and keeps its traceback. ``--debug`` or ``VERL_DEBUG=1`` shows the
traceback of user errors too.

Each class also derives from the built-in exception a caller would have caught before
(``ValueError``, ``OSError``, ...), so existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations

import os

__all__ = [
    "CheckpointLoadError",
    "DataError",
    "DiskError",
    "HangError",
    "ModelError",
    "PreflightError",
    "RewardFunctionError",
    "UserError",
    "debug_enabled",
    "one_line",
]


class UserError(Exception):
    """Base of every error caused by user input; the message is a single line.

    Args:
        message: what is wrong and, where possible, what to do; newlines are collapsed.
    """

    exit_code: int = 1
    kind: str = "error"

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class DataError(UserError, ValueError):
    """A data file cannot be read or a row breaks the schema (names the file and line/row)."""

    kind = "data error"


class RewardFunctionError(UserError, ValueError):
    """The custom reward function is missing, not callable, or has the wrong signature."""

    kind = "reward function error"


class ModelError(UserError, ValueError):
    """The model / tokenizer pair cannot serve the configured run (vocabulary, context, weights)."""

    kind = "model error"


class CheckpointLoadError(UserError, RuntimeError):
    """A checkpoint or weights file exists but cannot be loaded (not weights, truncated, foreign run)."""

    kind = "checkpoint error"


class DiskError(UserError, OSError):
    """An output or checkpoint path is not a writable directory, or the disk is full."""

    kind = "disk error"


class PreflightError(UserError, ValueError):
    """A pre-flight check failed (see `verl.trainer.preflight`)."""

    kind = "pre-flight check failed"


class HangError(UserError, RuntimeError):
    """A worker-group call exceeded its deadline; the workers' stacks were dumped."""

    kind = "hang"
    exit_code = 3


def one_line(message: object) -> str:
    """``message`` with newlines and runs of spaces collapsed into single spaces."""
    return " ".join(str(message).split())


def debug_enabled(argv: list[str] | None = None) -> bool:
    """True when tracebacks of user errors should be shown (``--debug`` or ``VERL_DEBUG=1``).

    ``VERL_TRACEBACK=1`` (the older spelling) is honoured too.
    """
    if argv is not None and "--debug" in argv:
        return True
    return any(os.environ.get(k, "") not in ("", "0", "false") for k in ("VERL_DEBUG", "VERL_TRACEBACK"))
