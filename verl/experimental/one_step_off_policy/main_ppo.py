"""``python -m verl.experimental.one_step_off_policy.main_ppo``: verl's one-step off-policy recipe.

Runs ``trainer.v1.trainer_mode=separate_async`` with the translation of
`verl.trainer.async_rl.legacy.translate_one_step_off` (one batch ahead, one sync per step).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Translate the arguments, then run `verl.commands.train.main`; returns the exit status."""
    from verl.trainer.async_rl.legacy import translate_one_step_off
    from verl.commands.train import main as main_ppo

    from verl.utils.errors import run_reporting_user_errors

    # the translation's config errors go through the one CLI error path, as main_ppo's do
    return run_reporting_user_errors(
        "verl train", lambda args: main_ppo(translate_one_step_off(args)), sys.argv[1:] if argv is None else argv
    )


if __name__ == "__main__":
    sys.exit(main())
