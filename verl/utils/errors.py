"""The `UserError` family: errors caused by the user's input, printed as one line by the CLI.

Anything that bad input can cause (a config value, a data file, a reward function, a model or
checkpoint directory, a full disk or an unwritable path) is raised as a subclass of `UserError`
at the place where it is detected, with a message that names the file / key / sample at fault.
Every command line entry (`verl.cli`, ``python -m verl.trainer.main_ppo``, ...) runs under
`run_reporting_user_errors`, which catches `UserError` and prints
``verl <command>: <kind>: <message>`` on one line with a non-zero exit status (the standard
library's `INPUT_ERRORS` are one line too); every other exception is a bug in verl and keeps its
traceback. ``--debug`` or ``VERL_DEBUG=1`` shows the
traceback of user errors too.

Each class also derives from the built-in exception a caller would have caught before
(``ValueError``, ``OSError``, ...), so existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

__all__ = [
    "CheckpointLoadError",
    "DataError",
    "DiskError",
    "HangError",
    "INPUT_ERRORS",
    "ModelError",
    "PreflightError",
    "RewardFunctionError",
    "UserError",
    "debug_enabled",
    "one_line",
    "run_reporting_user_errors",
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
    """A pre-flight check failed (see `verl.run.preflight`)."""

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


INPUT_ERRORS: tuple[type[BaseException], ...] = (FileNotFoundError, ValueError, ImportError, RuntimeError, OSError)
"""Standard-library errors that bad input can still cause where no `UserError` is raised at the
source (files, workers, a user's module): printed as one line with the ``--debug`` hint, exit 1."""


def run_reporting_user_errors(prog: str, entry: Callable[[list[str]], int | None], argv: Sequence[str]) -> int:
    """Run ``entry(argv)``: the one error path of every sub-command (and of ``python -m`` entry points).

    - `UserError` (``ConfigError`` included): one line ``<prog>: <kind>: <message>`` on stderr,
      exit status ``e.exit_code`` (2 for config errors); e.g.
      ``verl sft: config error: unknown key 'data.promt_key' (did you mean 'data.prompt_key'?)``.
    - `INPUT_ERRORS`: one line ``<prog>: error: <type>: <message> (run with --debug for the
      traceback)``, exit status 1.
    - Ctrl-C: ``<prog>: interrupted``, exit status 130.

    ``--debug`` or ``VERL_DEBUG=1`` re-raises instead (the traceback); any other exception is a
    bug and keeps its traceback.

    Args:
        prog: the command as the user typed it (``verl train``), prefixed to the message.
        entry: the sub-command function.
        argv: its arguments (``--debug`` already removed).

    Returns:
        The sub-command's exit status, or the error's as above.
    """
    try:
        return int(entry(list(argv)) or 0)
    except UserError as e:
        if debug_enabled():
            raise
        print(f"{prog}: {e.kind}: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except INPUT_ERRORS as e:
        if debug_enabled():
            raise
        print(
            f"{prog}: error: {type(e).__name__}: {one_line(e)} (run with --debug for the traceback)",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return 130
