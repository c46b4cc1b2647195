"""``python -m verl.trainer.main_generation``: verl"s offline generation entry path over `verl.commands.generate`."""

from __future__ import annotations

import sys

from verl.commands.generate import check_output_path, generate, main, read_data_rows, sample_seeds

__all__ = ["check_output_path", "generate", "main", "read_data_rows", "sample_seeds"]

if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_generation", main, sys.argv[1:]))
