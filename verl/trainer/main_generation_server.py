"""``python -m verl.trainer.main_generation_server``: verl"s standalone rollout servers over
`verl.commands.generate_server`."""

from __future__ import annotations

import sys

from verl.commands.generate_server import generate_with_servers, main, start_servers, submit_request

__all__ = ["generate_with_servers", "main", "start_servers", "submit_request"]

if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_generation_server", main, sys.argv[1:]))
