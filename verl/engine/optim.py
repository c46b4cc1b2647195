"""Optimizer, LR schedule and the clipped, non-finite-safe optimizer step of the training engine."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from verl.config.schema import OptimConfig


def build_optimizer(module: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters of `module` (Loshchilov & Hutter 2019).

    The fused implementation (one kernel over all parameters; CPU and CUDA) when every parameter
    is a plain floating-point tensor on one of those devices, else the multi-tensor (foreach)
    one, e.g. for FSDP2's DTensor shards. Both compute the same update up to float rounding;
    fused saves the per-parameter Python loop and several passes over the optimizer state.
    Parameters on different meshes (tensor parallel: TP-split DTensors next to replicated
    ones) take the per-parameter loop, as a multi-tensor op cannot mix meshes.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    fused = bool(params) and all(
        type(p) is torch.nn.Parameter and p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params
    )
    foreach = None if fused else len(_by_mesh(params)) == 1
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        fused=True if fused else None,
        foreach=foreach,
    )


def _by_mesh(tensors: list[torch.Tensor]) -> dict[Any, list[torch.Tensor]]:
    """``tensors`` grouped by their DTensor mesh (None: plain tensors)."""
    groups: dict[Any, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault(getattr(t, "device_mesh", None), []).append(t)
    return groups


def _global_grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients, also over parameters on different meshes (one norm per mesh,
    made whole with ``full_tensor``, then combined)."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = []
    for group in _by_mesh(grads).values():
        norm = torch.nn.utils.get_total_norm(group)
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    return torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.tensor(0.0)


def lr_multiplier(
    step: int, warmup_steps: int, total_steps: int, style: str, min_lr_ratio: float, num_cycles: float = 0.5
) -> float:
    """LR multiplier of update number `step` (1-based): linear warm-up, then constant, linear or cosine.

    Update k of a warm-up of W updates uses lr * k / W (so the first update is not wasted at 0);
    after warm-up ``constant`` keeps lr, ``cosine`` is
    ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(2 pi num_cycles progress)) / 2`` (progress
    0 -> 1 over the decay phase; num_cycles = 0.5, verl's default, decays once to
    ``min_lr_ratio * lr`` at ``total_steps``; Loshchilov & Hutter 2017, SGDR without restarts);
    ``linear`` is ``min_lr_ratio + (1 - min_lr_ratio) * (1 - progress)`` (TorchTitan's ``decay_type``
    linear with ``min_lr_factor``, verl's torchtitan engine default; Megatron's ``lr_decay_style`` linear).
    """
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    if style == "constant" or total_steps <= warmup_steps:
        return 1.0
    if style not in ("cosine", "linear"):
        raise ValueError(f"warmup_style must be 'constant', 'linear' or 'cosine', got {style!r}")
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if style == "linear":
        return min_lr_ratio + (1.0 - min_lr_ratio) * (1.0 - progress)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(2.0 * math.pi * num_cycles * progress))


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR stepping once per RL step (one ``update_actor``/``update_critic`` call), as verl.

    Warm-up length: ``lr_warmup_steps`` if >= 0, else ``lr_warmup_steps_ratio * total_steps``.
    The scheduler's internal counter s (0 before the first update) maps to update s + 1; with
    ``zero_indexed_step`` (verl's engine-layout SFT default) to update s, so the first warm-up
    update runs at lr 0 as verl's ``get_*_schedule_with_warmup``.
    """
    warmup = cfg.lr_warmup_steps if cfg.lr_warmup_steps >= 0 else int(cfg.lr_warmup_steps_ratio * total_steps)
    # lr_scheduler_type is verl's key; warmup_style its deprecated alias (finalize makes them agree)
    style, floor, cycles = cfg.lr_scheduler_type, cfg.min_lr_ratio, cfg.num_cycles
    offset = 0 if getattr(cfg, "zero_indexed_step", False) else 1
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s + offset, warmup, total_steps, style, floor, cycles)
    )


def clip_grad_and_step(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer, max_norm: float
) -> tuple[float, bool]:
    """Clip the global gradient norm and step; a non-finite norm skips the step.

    Returns:
        (grad_norm, stepped). A NaN/inf norm (e.g. from an overflowing loss) zeroes the
        gradients without updating, so one bad micro-batch cannot poison the weights.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    if len(_by_mesh(params)) > 1:  # tensor parallel: TP-split and replicated parameters
        norm = _global_grad_norm(params)
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=False)
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    if hasattr(norm, "full_tensor"):  # DTensor under FSDP2: the global norm
        norm = norm.full_tensor()
    norm_f = float(norm)
    if not math.isfinite(norm_f):
        optimizer.zero_grad(set_to_none=True)
        return norm_f, False
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm_f, True
