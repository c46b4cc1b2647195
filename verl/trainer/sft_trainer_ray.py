"""``python -m verl.trainer.sft_trainer_ray``: verl"s SFT-on-Ray entry path over `verl.commands.sft_ray`."""

from __future__ import annotations

import sys

from verl.commands.sft_ray import SFTRayWorker, main, run_on_ray

__all__ = ["SFTRayWorker", "main", "run_on_ray"]

if __name__ == "__main__":
    sys.exit(main())
