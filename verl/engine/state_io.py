"""Engine state files: ``model.safetensors``, ``optim.pt``, ``scheduler.json`` of one role.

Files hold *full* (unsharded) tensors gathered with ``torch.distributed.checkpoint.state_dict``
(``full_state_dict=True, cpu_offload=True``) and written by rank 0; the optimizer state is
keyed by parameter name and loaded with ``weights_only=True``. Any world size (or local mode)
loads them and re-shards with ``set_*_state_dict``, so resuming under a different world size
needs no conversion. Nothing in these files can run code when loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from verl.engine.dist import barrier, dp_rank
from verl.engine.fsdp import full_model_state, full_state_options


def save_engine_state(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any, out_dir: str | Path
) -> None:
    """Write model / optimizer / scheduler state into `out_dir` (collective; rank 0 writes)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model_sd = full_model_state(module, all_ranks=False)
    optim_sd = (
        get_optimizer_state_dict(module, optimizer, options=full_state_options()) if optimizer is not None else None
    )
    if dp_rank() == 0:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        # clone: tied weights share storage, which safetensors refuses to write
        save_file({k: v.detach().contiguous().clone() for k, v in model_sd.items()}, str(out / "model.safetensors"))
        if optim_sd is not None:
            torch.save(optim_sd, out / "optim.pt")
        if scheduler is not None:
            (out / "scheduler.json").write_text(json.dumps(scheduler.state_dict(), default=lambda o: None))
        for f in out.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    barrier()


def load_engine_state(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any, in_dir: str | Path
) -> None:
    """Restore what `save_engine_state` wrote, under any world size.

    Raises:
        ValueError: the weights were written by another model (or another LoRA setting).
        CheckpointLoadError: an ``optim.pt`` that is not plain tensors (a pickle referencing code:
            refused, never run) or is damaged, naming the file.
    """
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    src = Path(in_dir)
    model_sd = load_file(str(src / "model.safetensors"))
    expected = set(module.state_dict().keys())
    if set(model_sd) != expected:
        missing, unexpected = sorted(expected - set(model_sd)), sorted(set(model_sd) - expected)
        raise ValueError(
            f"checkpoint {src} does not match this model (was it written by another model or "
            f"LoRA setting?): missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    set_model_state_dict(module, model_sd, options=full_state_options(strict=True))
    if optimizer is not None and (src / "optim.pt").exists():
        from verl.utils.safe_load import safe_torch_load

        optim_sd = safe_torch_load(
            src / "optim.pt", "trainer.resume_mode / trainer.resume_from_path", "optimizer state", map_location="cpu"
        )
        set_optimizer_state_dict(module, optimizer, optim_sd, options=full_state_options())
    if scheduler is not None and (src / "scheduler.json").exists():
        state = json.loads((src / "scheduler.json").read_text())
        state.pop("lr_lambdas", None)
        scheduler.load_state_dict({**scheduler.state_dict(), **state})
