"""Step metrics with verl's names: data statistics, timing, throughput and MFU.

Names: ``critic/score/*`` (sequence scores), ``critic/rewards/*`` (after the in-reward KL),
``critic/advantages/*``, ``critic/returns/*``, ``critic/values/*``, ``response_length/*``
(incl. ``clip_ratio``: fraction that hit the length limit), ``prompt_length/*``,
``timing_s/<stage>``, ``timing_per_token_ms/<stage>``, ``perf/throughput`` (tokens per second
per device), ``perf/mfu/actor``.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch

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
    """``actor/entropy_rollout``: token-mean entropy `(B, R)` of the policy on the sampled responses."""
    return {"actor/entropy_rollout": float((entropys * response_mask).sum() / response_mask.sum())}


def compute_data_metrics(batch: DataProto, use_critic: bool) -> dict[str, float]:
    """Statistics of one step's trajectories (masked to valid response tokens)."""
    b = batch.batch
    mask = b["response_mask"].bool()
    response_length = mask.sum(-1).float()
    max_len = b["responses"].shape[-1]
    prompt_length = b["attention_mask"][:, : b["prompts"].shape[-1]].sum(-1).float()
    out: dict[str, float] = {}
    out.update(_stats("critic/score", b["token_level_scores"].sum(-1)))
    out.update(_stats("critic/rewards", b["token_level_rewards"].sum(-1)))
    out.update(_stats("critic/advantages", b["advantages"][mask]))
    out.update(_stats("critic/returns", b["returns"][mask]))
    if use_critic and "values" in b.keys():
        out.update(_stats("critic/values", b["values"][mask]))
        ret, val = b["returns"][mask], b["values"][mask]
        out["critic/vf_explained_var"] = float(1.0 - (ret - val).var() / (ret.var() + 1e-5))
    out.update(_stats("response_length", response_length))
    out["response_length/clip_ratio"] = float((response_length >= max_len).float().mean())
    out.update(_stats("prompt_length", prompt_length))
    return out


def compute_timing_metrics(timing: dict[str, float], num_tokens: int) -> dict[str, float]:
    """``timing_s/<stage>`` and ``timing_per_token_ms/<stage>``."""
    out = {f"timing_s/{k}": v for k, v in timing.items()}
    if num_tokens:
        out.update({f"timing_per_token_ms/{k}": 1000.0 * v / num_tokens for k, v in timing.items() if k != "step"})
    return out


@functools.lru_cache(maxsize=1)
def device_peak_flops(device: str = "cpu") -> float:
    """Peak FLOP/s of one device: the datasheet bf16 figure on GPU, a measured matmul on CPU.

    On CPU the peak is the best of a few fp32 1024x1024 matmuls on this machine (DESIGN.md §6);
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


def compute_throughput_metrics(batch: DataProto, timing: dict[str, float], world_size: int, n_params: int, ppo_epochs: int, device: str) -> dict[str, float]:
    """``perf/total_num_tokens``, ``perf/throughput`` (tokens/s/device) and ``perf/mfu/actor``.

    MFU of the actor update = 6 · N_params · tokens · ppo_epochs (forward + backward,
    Kaplan et al. 2020) / (update time · peak FLOP/s · devices).
    """
    tokens = int(batch.batch["attention_mask"].sum())
    out = {"perf/total_num_tokens": float(tokens), "perf/time_per_step": timing.get("step", 0.0)}
    if timing.get("step"):
        out["perf/throughput"] = tokens / (timing["step"] * world_size)
    if timing.get("update_actor"):
        flops = 6.0 * n_params * tokens * ppo_epochs
        out["perf/mfu/actor"] = flops / (timing["update_actor"] * device_peak_flops(device) * world_size)
    return out


def reduce_worker_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Mean of each per-worker list (workers already all-reduce global quantities)."""
    out = {}
    for k, v in metrics.items():
        vals = v if isinstance(v, (list, tuple)) else [v]
        out[k] = float(np.mean([float(x) for x in vals]))
    return out
