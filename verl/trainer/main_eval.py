"""``python -m verl.trainer.main_eval``: verl"s offline scoring entry path over `verl.commands.evaluate`."""

from __future__ import annotations

import sys

from verl.commands.evaluate import evaluate, main

__all__ = ["evaluate", "main"]

if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_eval", main, sys.argv[1:]))
