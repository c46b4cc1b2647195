"""``verl sft`` / ``python -m verl.trainer.sft_trainer``: verl"s SFT entry path over `verl.commands.sft`."""

from __future__ import annotations

import sys

from verl.commands.sft import dpo_main, init_distributed, main, run, train_sft

__all__ = ["dpo_main", "init_distributed", "main", "run", "train_sft"]

if __name__ == "__main__":
    sys.exit(main())
