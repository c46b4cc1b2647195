"""``python -m verl.experimental.fully_async_policy.fully_async_main``: verl's fully async recipe.

Its ``async_training.*`` keys are translated onto ``trainer.v1.separate_async`` /
``trainer.v1.sampler`` (`verl.trainer.async_rl.legacy.translate_fully_async`, table there); a key
without an equivalent is a one-line error naming the V1 key to use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Translate the arguments, then run `verl.trainer.main_ppo.main`; returns the exit status."""
    from verl.trainer.async_rl.legacy import translate_fully_async
    from verl.trainer.main_ppo import main as main_ppo

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return main_ppo(translate_fully_async(args))
    except ValueError as e:  # ConfigError included: one line, as main_ppo prints it
        print(f"verl train: config error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
