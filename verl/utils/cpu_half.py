"""Half precision on a CPU without native support for it: measured and said before a run starts.

A CPU runs bfloat16 / float16 matmuls natively only with the matching instructions (AVX-512 BF16
or AMX for bf16, AVX-512 FP16 or AMX-FP16 for fp16); elsewhere PyTorch converts element by
element and the matmul is orders of magnitude slower than float32. Measured with torch 2.13 on
two machines of this project: an AMD EPYC with AVX2 only ran a 2048² bf16 matmul at 0.29 GFLOP/s
against 119 GFLOP/s in float32 (~400x slower; the one-thread 256² check below measures 34-48x
there, float32 being further from its peak at that size); an Intel CPU with AMX ran bf16 at
~860 GFLOP/s (3.6x faster than its float32) but fp16 ~100x slower. Rather than guess from CPU flags, the check
times one small matmul per dtype (a few ms; cached per process) and compares it with float32.

A run is never refused for this: the setting works, it is only slow. When a half dtype is at least
`SLOW_FACTOR` times slower than float32 here, `check_half_precision` names every key that asks
for it, the measured factor and the way out (float32), in the pre-flight log line and in
``verl doctor``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from verl.utils.dtypes import DTYPES
from verl.utils.timing import best_seconds

logger = logging.getLogger(__name__)

__all__ = ["SLOW_FACTOR", "check_half_precision", "half_settings", "matmul_slowdown"]

# A half dtype this much slower than float32 is worth a warning (native bf16 is ~0.3-1x the time).
SLOW_FACTOR = 4.0
# 34 MFLOP per matmul: ~0.1 s where bf16 is emulated, < 1 ms where it is native. Smaller sizes
# understate the gap (float32 is far from its peak at 128²: measured 19x there vs 34-48x at 256²).
_SIZE = 256
HALF = (torch.bfloat16, torch.float16)


@functools.cache
def matmul_slowdown(dtype: torch.dtype) -> float:
    """Time of a `(256, 256) @ (256, 256)` CPU matmul in ``dtype`` over its time in float32.

    Each is the best of up to 3 calls on one thread, stopping after 50 ms (an emulated dtype is
    timed once).

    > 1 means slower than float32. Cached per process (the first call takes a few ms, ~0.1-0.2 s
    where ``dtype`` is emulated).
    """
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(_SIZE, _SIZE, generator=gen), torch.randn(_SIZE, _SIZE, generator=gen)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a busy sibling core cannot stall a parallel region's barrier
    try:
        half_a, half_b = a.to(dtype), b.to(dtype)
        # warm-up at a negligible size: an emulated 256² matmul takes ~0.1 s
        half = best_seconds(lambda: half_a @ half_b, budget_s=0.05, warmup=lambda: half_a[:16] @ half_b[:, :16])
        return half / best_seconds(lambda: a @ b, budget_s=0.05)
    finally:
        torch.set_num_threads(threads)


def _half(value: Any) -> torch.dtype | None:
    """The half dtype a config value names, else None."""
    dtype = DTYPES.get(value) if isinstance(value, str) else None
    return dtype if dtype in HALF else None


def half_settings(cfg: Any) -> list[tuple[str, torch.dtype]]:
    """(dotted key, dtype) of every compute-dtype setting of a root config that asks for bf16 / fp16.

    Read: the actor model's ``dtype``, the rollout's ``dtype``, the actor's
    ``fsdp_config.mixed_precision``, and those of the roles that run: the reference (with a KL
    loss or in-reward KL), the critic (``critic.enable``) and the reward model (``reward_model.enable``).
    """
    arr = cfg.actor_rollout_ref
    candidates: list[tuple[str, Any]] = [
        ("actor_rollout_ref.model.dtype", arr.model.dtype),
        ("actor_rollout_ref.rollout.dtype", arr.rollout.dtype),
        ("actor_rollout_ref.actor.fsdp_config.mixed_precision", arr.actor.fsdp_config.mixed_precision),
    ]
    if arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        candidates.append(("actor_rollout_ref.ref.fsdp_config.mixed_precision", arr.ref.fsdp_config.mixed_precision))
    if cfg.critic.enable:
        candidates += [
            ("critic.model.dtype", cfg.critic.model.dtype),
            ("critic.model.fsdp_config.mixed_precision", cfg.critic.model.fsdp_config.mixed_precision),
        ]
    if cfg.reward_model.enable:
        candidates += [
            ("reward_model.model.dtype", cfg.reward_model.model.dtype),
            ("reward_model.model.fsdp_config.mixed_precision", cfg.reward_model.model.fsdp_config.mixed_precision),
        ]
    return [(key, dtype) for key, value in candidates if (dtype := _half(value)) is not None]


def check_half_precision(cfg: Any) -> str | None:
    """Warn (log) when a half dtype asked for on a CPU run is `SLOW_FACTOR`x slower than float32 here.

    Returns:
        None on a GPU run or without half-precision settings (nothing to check); otherwise one
        line naming each half dtype's measured slowdown (the same line is logged as a warning
        when any of them is slow). Never raises: the setting works, it is only slow.
    """
    if getattr(cfg.trainer, "device", "cpu") != "cpu":
        return None
    settings = half_settings(cfg)
    if not settings:
        return None
    parts, slow = [], False
    for dtype in dict.fromkeys(d for _, d in settings):
        factor = matmul_slowdown(dtype)
        keys = ", ".join(k for k, d in settings if d == dtype)
        name = str(dtype).removeprefix("torch.")
        parts.append(f"{name} matmul {factor:.1f}x the float32 time on this CPU ({keys})")
        slow |= factor >= SLOW_FACTOR
    line = "; ".join(parts)
    if slow:
        line = f"WARNING: {line}: this CPU has no native support for that dtype; set float32 (or null) for a fast run"
        logger.warning("half precision: %s", line)
    return line
