"""Step metrics with verl's names: data statistics, timing, throughput, MFU and memory.

Names: ``critic/score/*`` (sequence scores), ``critic/rewards/*`` (after the in-reward KL),
``critic/advantages/*``, ``critic/returns/*``, ``critic/values/*``, ``response_length/*`` and
``prompt_length/*`` (incl. ``clip_ratio``: fraction that hit the length limit),
``timing_s/<stage>``, ``timing_per_token_ms/<stage>`` (``gen`` per response token; ``ref``,
``values``, ``adv``, ``update_critic``, ``update_actor`` per prompt + response token, as verl),
``perf/throughput`` (tokens per second per device), ``perf/mfu/{actor,critic}``,
``perf/max_memory_{allocated,reserved}_gb``, ``perf/cpu_memory_used_gb``, ``global_seqlen/*``.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch

from verl.algorithms.masked import masked_mean, masked_sum
from verl.protocol import DataProto


@contextmanager
def timer(name: str, timing: dict[str, float]) -> Iterator[None]:
    """Add the wall time (seconds) of the block to ``timing[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    v = values.float()
    return {f"{prefix}/mean": float(v.mean()), f"{prefix}/max": float(v.max()), f"{prefix}/min": float(v.min())}


def compute_rollout_entropy_metrics(entropys: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """``actor/entropy_rollout``: token-mean entropy `(B, R)` of the policy on the sampled responses (masked slots
    selected away)."""
    return {"actor/entropy_rollout": float(masked_mean(entropys, response_mask))}


def compute_data_metrics(batch: DataProto, use_critic: bool) -> dict[str, float]:
    """Statistics of one step's trajectories (valid response tokens selected; padded slots never count)."""
    b = batch.batch
    mask = b["response_mask"].bool()
    response_length = mask.sum(-1).float()
    max_len = b["responses"].shape[-1]
    prompt_length = b["attention_mask"][:, : b["prompts"].shape[-1]].sum(-1).float()
    out: dict[str, float] = {}
    out.update(_stats("critic/score", masked_sum(b["token_level_scores"], mask, axis=-1)))
    out.update(_stats("critic/rewards", masked_sum(b["token_level_rewards"], mask, axis=-1)))
    out.update(_stats("critic/advantages", b["advantages"][mask]))
    out.update(_stats("critic/returns", b["returns"][mask]))
    if use_critic and "values" in b.keys():
        out.update(_stats("critic/values", b["values"][mask]))
        ret, val = b["returns"][mask], b["values"][mask]
        out["critic/vf_explained_var"] = float(1.0 - (ret - val).var() / (ret.var() + 1e-5))
    out.update(_stats("response_length", response_length))
    out["response_length/clip_ratio"] = float((response_length >= max_len).float().mean())
    out.update(_stats("prompt_length", prompt_length))
    out["prompt_length/clip_ratio"] = float((prompt_length >= b["prompts"].shape[-1]).float().mean())
    return out


PER_TOKEN_STAGES = ("ref", "values", "adv", "update_critic", "update_actor")


def compute_timing_metrics(batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
    """``timing_s/<stage>`` (seconds) and ``timing_per_token_ms/<stage>`` (verl's definition).

    ``gen`` is divided by the response tokens, ``ref``/``values``/``adv``/``update_critic``/
    ``update_actor`` by all prompt + response tokens of the batch; other stages get no
    per-token figure.
    """
    b = batch.batch
    response_tokens = float(b["response_mask"].sum())
    all_tokens = float(b["attention_mask"].sum())
    per_stage = {"gen": response_tokens, **{name: all_tokens for name in PER_TOKEN_STAGES}}
    out = {f"timing_s/{k}": v for k, v in timing.items()}
    out.update(
        {
            f"timing_per_token_ms/{k}": 1000.0 * timing[k] / per_stage[k]
            for k in per_stage
            if k in timing and per_stage[k] > 0
        }
    )
    return out


def compute_seqlen_balance_metrics(seqlens: list[int], partitions: list[list[int]]) -> dict[str, float]:
    """``global_seqlen/*``: token counts per data-parallel rank before and after balancing (verl's).

    Args:
        seqlens: `(B,)` tokens (prompt + response) of each trajectory, in batch order.
        partitions: The balanced assignment: per rank, the trajectory indices it gets.

    Returns:
        ``min``/``max``/``minmax_diff`` of the per-rank sums when the batch is cut into equal
        consecutive chunks (no balancing), ``balanced_min``/``balanced_max`` of the balanced
        sums, and ``mean`` = total tokens / ranks.
    """
    k = len(partitions)
    chunk = len(seqlens) // k
    sums = [sum(seqlens[i : i + chunk]) for i in range(0, chunk * k, chunk)]
    balanced = [sum(seqlens[i] for i in part) for part in partitions]
    return {
        "global_seqlen/min": float(min(sums)),
        "global_seqlen/max": float(max(sums)),
        "global_seqlen/minmax_diff": float(max(sums) - min(sums)),
        "global_seqlen/balanced_min": float(min(balanced)),
        "global_seqlen/balanced_max": float(max(balanced)),
        "global_seqlen/mean": float(sum(seqlens)) / k,
    }


def compute_memory_metrics(device: str) -> dict[str, float]:
    """``perf/max_memory_{allocated,reserved}_gb`` and ``perf/cpu_memory_used_gb`` (GiB, verl's).

    On CUDA the first two are torch's peak allocated / reserved device memory of this process;
    on CPU torch keeps no allocator statistics, so both are this process's peak resident set
    size. ``cpu_memory_used_gb`` is the host's used memory (``psutil.virtual_memory().used``).
    """
    import psutil

    gib = 1024.0**3
    if device == "cuda" and torch.cuda.is_available():
        allocated, reserved = torch.cuda.max_memory_allocated() / gib, torch.cuda.max_memory_reserved() / gib
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib  # ru_maxrss is KiB on Linux
        allocated = reserved = peak
    return {
        "perf/max_memory_allocated_gb": float(allocated),
        "perf/max_memory_reserved_gb": float(reserved),
        "perf/cpu_memory_used_gb": psutil.virtual_memory().used / gib,
    }


@functools.lru_cache(maxsize=1)
def device_peak_flops(device: str = "cpu") -> float:
    """Peak FLOP/s of one device: the datasheet bf16 figure on GPU, a measured matmul on CPU.

    On CPU the peak is the best of a few fp32 1024x1024 matmuls on this machine;
    GPU names not in the table fall back to the H100 dense bf16 figure.
    """
    if device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        table = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40": 181e12, "A10": 125e12}
        return next((v for k, v in table.items() if k in name), 989e12)
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def compute_throughput_metrics(
    batch: DataProto, timing: dict[str, float], world_size: int, n_params: int, ppo_epochs: int, device: str
) -> dict[str, float]:
    """``perf/total_num_tokens``, ``perf/throughput`` (tokens/s/device) and ``perf/mfu/{actor,critic}``.

    MFU of an update = 6 · N_params · tokens · ppo_epochs (forward + backward, Kaplan et al.
    2020) / (update time · peak FLOP/s · devices); the critic counts the actor's N_params.
    """
    tokens = int(batch.batch["attention_mask"].sum())
    out = {"perf/total_num_tokens": float(tokens), "perf/time_per_step": timing.get("step", 0.0)}
    if timing.get("step"):
        out["perf/throughput"] = tokens / (timing["step"] * world_size)
    for role in ("actor", "critic"):  # the critic shares the actor's backbone (+ a 1-output head)
        if timing.get(f"update_{role}"):
            flops = 6.0 * n_params * tokens * ppo_epochs
            out[f"perf/mfu/{role}"] = flops / (timing[f"update_{role}"] * device_peak_flops(device) * world_size)
    return out


def reduce_worker_metrics(metrics: dict[str, Any] | list[dict[str, Any]]) -> dict[str, float]:
    """Mean of each per-worker list (workers already all-reduce global quantities).

    ``metrics`` is ``{name: value or list}``, or a list of such dicts (verl's workers report
    one dict per micro-batch); every value of a name is averaged.
    """
    if isinstance(metrics, list):
        merged: dict[str, list[Any]] = {}
        for part in metrics:
            for k, v in part.items():
                merged.setdefault(k, []).extend(v if isinstance(v, (list, tuple)) else [v])
        metrics = merged
    out = {}
    for k, v in metrics.items():
        vals = v if isinstance(v, (list, tuple)) else [v]
        out[k] = float(np.mean([float(x) for x in vals]))
    return out
