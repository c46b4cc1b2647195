"""``python -m verl.experimental.fully_async_policy.fully_async_main``: verl's fully async recipe.

Its ``async_training.*`` keys are translated onto ``trainer.v1.separate_async`` /
``trainer.v1.sampler`` (`verl.trainer.async_rl.legacy.translate_fully_async`, table there); a key
without an equivalent is a one-line error naming the V1 key to use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Translate the arguments, then run `verl.commands.train.main`; returns the exit status."""
    from verl.config import load_config
    from verl.trainer.async_rl.legacy import check_partial_rollout, translate_fully_async, wants_partial_rollout
    from verl.commands.train import hydra_config_args
    from verl.commands.train import main as main_ppo

    from verl.utils.errors import run_reporting_user_errors

    def body(args: list[str]) -> int:
        translated = translate_fully_async(args)
        path, overrides = hydra_config_args([a for a in translated if a != "--debug"])
        check_partial_rollout(wants_partial_rollout(args), load_config(path, [a for a in overrides if "=" in a]))
        return main_ppo(translated)

    # the translation's config errors go through the one CLI error path, as main_ppo's do
    return run_reporting_user_errors("verl train", body, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
