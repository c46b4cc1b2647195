"""The decode step's LM head on CPU, in whichever of two matmul layouts is faster here.

Decoding multiplies a few rows of hidden states by the whole LM head every token: `(B, H) @ (H, V)`
with B = the rollout batch (16 at the GSM8K bench shape) and V = 151,936 for Qwen vocabularies,
which reads the 155 MB float32 head once per token. CPU BLAS libraries handle this skinny shape
very differently depending on which operand is "tall": measured on an AMD EPYC (AVX2, 2 threads,
torch 2.13), ``F.linear(h, W)`` took 47-48 ms, ``(W @ hᵀ)ᵀ`` 27 ms plus a 2-3 ms transposing copy
(1.6x faster, 64 decode steps per GSM8K rollout: ~1.1 s per step). Which layout wins depends
on the BLAS and the CPU, so it is measured, not assumed: the first call for a given head shape,
dtype and batch size (rounded up to a power of two, so the agent-loop server's varying pass sizes
share a few measurements) times both (best of 3 each, with the real weight; ~0.3 s per shape,
once per process) and keeps the faster. Both compute each logit as the same dot product, summed in another order by
another BLAS kernel: the tests check against the model's own forward that the sampled tokens are
the same and the rollout log-probs within 2e-5 either way (measured: at most 7.9e-6).

Applies to eager float32 decoding on CPU of a plain transformers causal LM whose logits are
``last_hidden_state @ lm_headᵀ`` (`verl.modules.forward.fused_lm_head`: no bias, soft-capping or
logit scale, no peft / FSDP2 wrapper) with a head of at least `MIN_HEAD_ELEMENTS` (smaller heads,
such as the built-in models' 100 x 64, gain nothing). Everything else runs the model's own head.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from verl.modules.forward import fused_lm_head
from verl.utils.timing import best_seconds

__all__ = ["MIN_HEAD_ELEMENTS", "decode_head", "head_logits"]

MIN_HEAD_ELEMENTS = 1 << 22  # 4M weights (16 MB float32): below this the layout cannot matter
_WEIGHT_MAJOR: dict[tuple[Any, ...], bool] = {}  # (V, H, rows bucket, dtype) -> weight-major is faster


def _weight_major(weight: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    return torch.mm(weight, hidden.t()).t().contiguous()


def weight_major_is_faster(weight: torch.Tensor, rows: int) -> bool:
    """Whether `(W @ hᵀ)ᵀ` beats ``F.linear(h, W)`` for ``rows`` rows here (measured once per shape,
    rows rounded up to a power of two)."""
    bucket = 1 << max(rows - 1, 0).bit_length()
    key = (*weight.shape, bucket, weight.dtype)
    if key not in _WEIGHT_MAJOR:
        h = torch.randn(bucket, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            linear = best_seconds(lambda: F.linear(h, weight))
            major = best_seconds(lambda: _weight_major(weight, h))
        _WEIGHT_MAJOR[key] = major < 0.9 * linear  # a clear win only: otherwise the model's own layout
    return _WEIGHT_MAJOR[key]


def head_logits(weight: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """`(B, V)` logits ``hidden @ weightᵀ`` in the faster layout (module docstring).

    Args:
        weight: `(V, H)` LM-head weight on CPU.
        hidden: `(B, H)` last hidden states, same dtype.
    """
    if weight_major_is_faster(weight, hidden.shape[0]):
        return _weight_major(weight, hidden)
    return F.linear(hidden, weight)


def decode_head(module: nn.Module) -> nn.Linear | None:
    """The LM head `head_logits` may replace for ``module``'s eager decode step, else None."""
    head = fused_lm_head(module)
    if head is None or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32:
        return None
    return head if head.weight.numel() >= MIN_HEAD_ELEMENTS else None
