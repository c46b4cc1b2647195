"""The one exception type of config loading, and the did-you-mean helper its messages use."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from verl.utils.errors import UserError

__all__ = ["ConfigError", "did_you_mean"]


class ConfigError(UserError, ValueError):
    """A configuration is invalid: unknown key, wrong type, value out of range, inconsistent sizes.

    Raised at load time, before any model or process is created. The message is always a single
    line that names the full dotted key (``actor_rollout_ref.actor.optim.lr: ...``), so that the
    command line can print it without a traceback (``verl config show`` exits with status 2).

    Args:
        message: What is wrong; newlines and runs of spaces are collapsed into single spaces.
    """

    kind = "config error"
    exit_code = 2


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """Returns ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when none is close.

    Args:
        word: The misspelt name.
        choices: The valid names.
        cutoff: ``difflib`` similarity ratio below which a choice is not suggested.
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""


def not_supported(path: str, what_to_do: str) -> ConfigError:
    """The one-line error for a refused setting: "`<key>` is not supported yet: <what to do>"."""
    return ConfigError(f"`{path}` is not supported yet: {what_to_do}")
