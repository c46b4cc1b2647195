"""The one table of dtype names accepted in configs (``float32``/``fp32``, ``bfloat16``/``bf16``, ...)."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The `torch.dtype` named by a config string (a `torch.dtype` passes through).

    Raises:
        ValueError: a name outside `DTYPES`.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]
