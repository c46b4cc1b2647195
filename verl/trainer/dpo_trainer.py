"""``verl dpo [CONFIG] [overrides]`` / ``python -m verl.trainer.dpo_trainer``: DPO / IPO on preference pairs.

The supervised trainer (`verl.trainer.sft_trainer`) with ``trainer.algorithm=dpo``: one stream of
(prompt, chosen, rejected) pairs, the loss of ``dpo.loss_type`` with ``dpo.beta`` and
``dpo.label_smoothing``, and reference log-probs computed once per batch, without gradient, by
the actor with its LoRA adapters off (``model.lora_rank > 0``) or by a frozen copy of the
initial model. Logged: ``train/loss``, ``rewards/{chosen,rejected,accuracies,margins}``,
``logps/{chosen,rejected}`` and, with ``data.val_files``, the same under ``val/``.
"""

from __future__ import annotations

import sys

from verl.commands.sft import dpo_main

__all__ = ["dpo_main"]

if __name__ == "__main__":
    sys.exit(dpo_main())
