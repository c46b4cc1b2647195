"""``verl train`` / ``python -m verl.trainer.main_ppo``: verl"s RL entry path over `verl.commands.train`."""

from __future__ import annotations

import sys

from verl.commands.train import full_history, hydra_config_args, main, plot_history, report, run, train_cli

__all__ = ["full_history", "hydra_config_args", "main", "plot_history", "report", "run", "train_cli"]

if __name__ == "__main__":
    sys.exit(main())
