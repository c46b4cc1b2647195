"""Tensor-parallel placement of LoRA (peft) adapters, consistent with the decoder block's TP plan.

peft wraps each targeted ``nn.Linear`` in a LoRA layer whose forward is
``y = base_layer(x) + lora_B(lora_A(dropout(x))) · scaling`` (LoRA, Hu et al. 2021), with
``lora_A`` `(r, in)` and ``lora_B`` `(out, r)`. Under the Megatron split of the block
(`verl.workers.sharding.tensor_parallel.tp_plan`) the adapters are placed so that every product
stays in the base layer's own layout:

* column-parallel base (``q/k/v/gate/up``: output features split over the TP group, input
  replicated): ``lora_A`` stays replicated (its input is the replicated ``x``, its output the whole
  rank-``r`` code) and ``lora_B`` is split column-wise like the base, so each TP rank adds its own
  output columns to its own slice of ``y``. The gradient reaching the code is summed over the group
  by ``lora_B``'s replicated input, so every rank's ``lora_A`` gradient is the whole one.
* row-parallel base (``o/down``: input features split, outputs summed over the group): ``lora_A``
  is split row-wise (its input is the rank's slice of ``x``; the partial codes are summed over the
  group) and ``lora_B`` stays replicated (it maps the whole code onto the replicated ``y``).

The replicated adapter matrices hold equal copies on the TP ranks, and FSDP2 shards everything over
the data-parallel dim as for the base weights. The rank ``r`` needs no divisibility; ``out`` and
``in`` are the base layer's, already checked (`check_tp_heads`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from verl.config.errors import ConfigError

__all__ = ["block_plan", "is_lora_layer"]


def is_lora_layer(module: nn.Module) -> bool:
    """True for a peft LoRA wrapper (``base_layer`` plus ``lora_A`` / ``lora_B`` adapter dicts)."""
    return all(hasattr(module, attr) for attr in ("base_layer", "lora_A", "lora_B"))


def block_plan(block: nn.Module, plan: dict[str, Any], what: str = "tensor_parallel_size") -> dict[str, Any]:
    """``plan`` (names relative to ``block``) rewritten for the block's LoRA layers (module docstring).

    A plain ``nn.Linear`` keeps its entry; a LoRA layer's entry moves to its ``base_layer`` and
    each adapter's ``lora_B`` (column-wise entry) or ``lora_A`` (row-wise entry) gets a fresh style
    of the same kind.

    Args:
        block: one decoder block (possibly with peft LoRA layers).
        plan: ``{relative name: ColwiseParallel() | RowwiseParallel()}`` (`tp_plan`).
        what: the key named in errors.

    Returns:
        The plan to pass to ``parallelize_module(block, tp_mesh, ...)``.

    Raises:
        ConfigError: a DoRA adapter (its magnitude vector is a per-output-column norm of the whole
            merged weight, not split here: not supported yet).
    """
    from torch.distributed.tensor.parallel import ColwiseParallel

    out: dict[str, Any] = {}
    for name, style in plan.items():
        layer = block.get_submodule(name)
        if not is_lora_layer(layer):
            out[name] = style
            continue
        if any(getattr(layer, "use_dora", {}).values()):
            raise ConfigError(f"{what} > 1 with DoRA adapters (use_dora) is not supported yet; use plain LoRA")
        out[f"{name}.base_layer"] = style
        split = "lora_B" if isinstance(style, ColwiseParallel) else "lora_A"
        for adapter in getattr(layer, split):
            out[f"{name}.{split}.{adapter}"] = type(style)()
    return out
