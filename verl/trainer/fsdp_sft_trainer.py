"""``python -m verl.trainer.fsdp_sft_trainer [CONFIG] key=value ...``: verl's SFT entry point.

Same as ``verl sft`` (`verl.trainer.sft_trainer`), and runs under
``torchrun --standalone --nnodes=1 --nproc_per_node=N -m verl.trainer.fsdp_sft_trainer ...``
(gloo on CPU, nccl on GPU), with verl's SFT keys (``data.*``, ``model.partial_pretrain``,
``optim.*``, ``trainer.*``).
"""

from __future__ import annotations

import sys

from verl.commands.sft import main

if __name__ == "__main__":
    sys.exit(main())
