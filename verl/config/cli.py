"""``verl config``: inspect configs without loading any model.

Usage::

    verl config show [CONFIG] [key=value ...]   # the resolved, finalized config as YAML
    verl config show --verl-keys [CONFIG] ...   # ... with verl's keys that have no effect here
    verl config list                            # the built-in presets

CONFIG is a YAML file or a preset name; it is the first argument when that argument is not an
override (has no ``=`` and does not start with ``~`` or ``+``). A bad config prints its one-line
error to stderr (``verl config: config error: ...``, as every command) and exits with status
2, without a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from verl.utils.errors import run_reporting_user_errors
from verl.config.loader import config_to_yaml, list_presets, load_config

__all__ = ["config_command", "main", "split_config_arg"]

USAGE = """usage: verl config show [--verl-keys] [CONFIG] [key=value ...]
       verl config list

  show   print the resolved config (defaults + CONFIG + overrides, finalized) as YAML;
         without CONFIG: the quick-start preset, as `verl train` runs it; --verl-keys also
         prints verl's keys that have no effect here, at verl's defaults (the file loads the same)
  list   list the built-in presets (usable as CONFIG)"""


DEFAULT_CONFIG = "quickstart"
"""The CLI's config when none is named (``verl train`` and ``verl config show`` agree on it)."""


def split_config_arg(args: Sequence[str], default: str | None = None) -> tuple[str | None, list[str]]:
    """Splits ``[CONFIG] [overrides...]``: the first argument is CONFIG unless it is an override.

    Without a CONFIG argument the result is ``default`` (None = the schema defaults).
    """
    args = list(args)
    if args and "=" not in args[0] and not args[0].startswith(("~", "+")):
        return args[0], args[1:]
    return default, args


def config_command(
    argv: Sequence[str] | None, usage: str, prog: str, body: Callable[[str | None, list[str]], int]
) -> int:
    """Run ``prog [CONFIG] [key=value ...]``: ``-h`` / ``--help`` prints ``usage``; otherwise
    ``body(config_path, overrides)``. Errors (Ctrl-C included) are the caller's: every command
    runs under `verl.utils.errors.run_reporting_user_errors`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(usage)
        return 0
    config_path, overrides = split_config_arg(args, None)
    return body(config_path, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``verl config ...``; returns the exit status (0 ok, 2 bad usage or bad config)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "list":
        print("\n".join(list_presets()))
        return 0
    if command != "show":
        print(f"verl config: unknown command '{command}'\n{USAGE}", file=sys.stderr)
        return 2
    if any(a in ("-h", "--help") for a in rest):
        print(USAGE)
        return 0
    verl_keys = "--verl-keys" in rest
    path, overrides = split_config_arg([a for a in rest if a != "--verl-keys"], DEFAULT_CONFIG)

    def show(_: list[str]) -> int:
        sys.stdout.write(config_to_yaml(load_config(path, overrides), verl_keys=verl_keys))
        return 0

    return run_reporting_user_errors("verl config", show, [])
