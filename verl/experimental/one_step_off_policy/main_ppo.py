"""``python -m verl.experimental.one_step_off_policy.main_ppo``: verl's one-step off-policy recipe.

Runs ``trainer.v1.trainer_mode=separate_async`` with the translation of
`verl.trainer.async_rl.legacy.translate_one_step_off` (one batch ahead, one sync per step).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Translate the arguments, then run `verl.trainer.main_ppo.main`; returns the exit status."""
    from verl.trainer.async_rl.legacy import translate_one_step_off
    from verl.trainer.main_ppo import main as main_ppo

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return main_ppo(translate_one_step_off(args))
    except ValueError as e:  # ConfigError included: one line, as main_ppo prints it
        print(f"verl train: config error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
