"""FSDP2 wrapping and full-state gathering.

With world size 1 modules stay plain (no process group, zero overhead). With more ranks each
transformer block and then the root are wrapped with ``fully_shard`` (FSDP2); the mixed
precision policy and CPU offload (``CPUOffloadPolicy``; pinned memory only with CUDA) follow
`FSDPConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from verl.utils.dtypes import torch_dtype

if TYPE_CHECKING:
    from verl.config.schema import FSDPConfig


def _blocks(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Transformer blocks to shard one by one (HF ``_no_split_modules`` classes)."""
    names = set()
    for m in module.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return [m for m in module.modules() if type(m).__name__ in names]


def shard_module(module: torch.nn.Module, cfg: FSDPConfig, world_size: int, mesh: Any = None) -> torch.nn.Module:
    """Wrap `module` with FSDP2 when `world_size` > 1; return it unchanged otherwise.

    Args:
        mesh: the 1-D `DeviceMesh` to shard over (the ``dp`` dim of a ``(dp, tp)`` mesh, whose
            ``world_size`` ranks it holds); None = every rank of the world.
    """
    if world_size <= 1:
        return module
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {"reshard_after_forward": cfg.reshard_after_forward}
    if mesh is not None:
        kwargs["mesh"] = mesh
    if cfg.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch_dtype(cfg.mixed_precision), reduce_dtype=torch.float32
        )
    if cfg.param_offload or cfg.optimizer_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for block in _blocks(module):
        fully_shard(block, **kwargs)
    fully_shard(module, **kwargs)
    return module


def full_state_options(cpu_offload: bool = True, **kw: Any) -> Any:
    """``StateDictOptions`` for full (unsharded) state dicts."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload, **kw)


def full_model_state(module: torch.nn.Module, all_ranks: bool = True) -> dict[str, torch.Tensor]:
    """Unsharded model state (a collective when sharded: every rank must call it).

    Args:
        all_ranks: every rank receives the full tensors (rollout weight sync); False = only
            rank 0 does, offloaded to CPU (checkpoint writing), the others get an empty dict.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=full_state_options(cpu_offload=not all_ranks))


def num_parameters(module: torch.nn.Module) -> int:
    """Total parameter count (global, also when sharded: DTensor numel is the full size)."""
    return sum(p.numel() for p in module.parameters())
