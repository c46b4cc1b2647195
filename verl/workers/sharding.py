"""FSDP2 sharding, full-state gathering for the rollout, and worker checkpoint files.

With world size 1 modules stay plain (no process group, zero overhead). With more ranks each
transformer block and then the root are wrapped with ``fully_shard`` (FSDP2); the mixed
precision policy and CPU offload (``CPUOffloadPolicy(pin_memory=False)``: pinned memory needs
CUDA) follow `FSDPConfig`.

Checkpoint files are *full* (unsharded) tensors gathered with
``torch.distributed.checkpoint.state_dict`` (``full_state_dict=True, cpu_offload=True``) and
written by rank 0: ``model.safetensors`` (weights), ``optim.pt`` (optimizer state keyed by
parameter name, loaded with ``weights_only=True``), ``scheduler.json``. Any world size (or local
mode) loads them and re-shards with ``set_*_state_dict``, so resuming under a different
world size needs no conversion. Nothing in these files can run code when loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from verl.config.schema import FSDPConfig

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "bf16": torch.bfloat16, "fp32": torch.float32}


def _blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Transformer blocks to shard one by one (HF ``_no_split_modules`` classes)."""
    names = set()
    for m in module.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return [m for m in module.modules() if type(m).__name__ in names]


def shard_module(module: torch.nn.Module, cfg: FSDPConfig, world_size: int) -> torch.nn.Module:
    """Wrap `module` with FSDP2 when `world_size` > 1; return it unchanged otherwise."""
    if world_size <= 1:
        return module
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {"reshard_after_forward": cfg.reshard_after_forward}
    if cfg.mixed_precision:
        dtype = _DTYPES[cfg.mixed_precision]
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    if cfg.param_offload or cfg.optimizer_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for block in _blocks(module):
        fully_shard(block, **kwargs)
    fully_shard(module, **kwargs)
    return module


def _options(cpu_offload: bool = True, **kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload, **kw)


def full_model_state(module: torch.nn.Module, all_ranks: bool = True) -> dict[str, torch.Tensor]:
    """Unsharded model state (a collective when sharded: every rank must call it).

    Args:
        all_ranks: every rank receives the full tensors (rollout weight sync); False = only
            rank 0 does, offloaded to CPU (checkpoint writing), the others get an empty dict.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(cpu_offload=not all_ranks))


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_worker_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any, out_dir: str | Path) -> None:
    """Write model / optimizer / scheduler state of one role into `out_dir` (rank 0 writes)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model_sd = full_model_state(module, all_ranks=False)
    optim_sd = get_optimizer_state_dict(module, optimizer, options=_options()) if optimizer is not None else None
    if _rank() == 0:
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
    _barrier()


def load_worker_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer | None, scheduler: Any, in_dir: str | Path) -> None:
    """Restore what `save_worker_state` wrote, under any world size."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    src = Path(in_dir)
    model_sd = load_file(str(src / "model.safetensors"))
    expected = set(module.state_dict().keys())
    if set(model_sd) != expected:
        missing, unexpected = sorted(expected - set(model_sd)), sorted(set(model_sd) - expected)
        raise ValueError(f"checkpoint {src} does not match this model (was it written by another model or "
                         f"LoRA setting?): missing {missing[:3]}, unexpected {unexpected[:3]}")
    set_model_state_dict(module, model_sd, options=_options(strict=True))
    if optimizer is not None and (src / "optim.pt").exists():
        optim_sd = torch.load(src / "optim.pt", map_location="cpu", weights_only=True)
        set_optimizer_state_dict(module, optimizer, optim_sd, options=_options())
    if scheduler is not None and (src / "scheduler.json").exists():
        state = json.loads((src / "scheduler.json").read_text())
        state.pop("lr_lambdas", None)
        scheduler.load_state_dict({**scheduler.state_dict(), **state})


def num_parameters(module: torch.nn.Module) -> int:
    """Total parameter count (global, also when sharded: DTensor numel is the full size)."""
    return sum(p.numel() for p in module.parameters())
