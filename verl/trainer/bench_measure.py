"""Measurement pieces shared by `verl bench` and its TRL peer (`verl.trainer.bench_trl`).

FLOP model of a step, the machine's measured matmul peak, a peak-RSS sampler and one step's
record; kept apart from `verl.trainer.bench` so the peer imports them without importing the
bench's driver (no import cycle).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

__all__ = ["STAGE_KEYS", "FlopModel", "RssSampler", "StepRecord", "flop_model_of", "measure_matmul_peak", "step_flops"]

STAGE_KEYS = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")


@dataclass(frozen=True)
class FlopModel:
    """Parameter counts that set the FLOPs of one token.

    Attributes:
        n_body: parameters every token's forward multiplies with (layers, final norm): all
            parameters minus the embedding table(s).
        n_head: parameters of the LM head (``vocab_size · hidden_size``), tied or not.
    """

    n_body: int
    n_head: int

    @classmethod
    def from_module(cls, module: torch.nn.Module) -> FlopModel:
        """Split a causal LM's parameters into body and head (tied embeddings counted once)."""
        cfg = module.config
        seen: set[int] = set()
        total = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        head = int(cfg.vocab_size) * int(cfg.hidden_size)
        tied = bool(getattr(cfg, "tie_word_embeddings", False))
        return cls(n_body=total - (head if tied else 2 * head), n_head=head)


def step_flops(flops: FlopModel, tokens: float, response_tokens: float, padded_rows: float,
               stages: set[str], ppo_epochs: int = 1, critic_body: int = 0) -> float:
    """FLOPs of one RL step's model work (see the module docstring for the counting rule).

    Args:
        flops: the actor's `FlopModel`.
        tokens: prompt + response tokens of the step (attention-mask sum, all trajectories).
        response_tokens: generated tokens (response-mask sum).
        padded_rows: trajectories x (R + 1): the positions where scoring forwards run the LM head.
        stages: stages that ran (``timing_s`` keys): ``gen``, ``old_log_prob``, ``ref``,
            ``values``, ``update_critic``, ``update_actor``.
        ppo_epochs: actor passes over the batch.
        critic_body: the critic's body parameters (0 without a critic).

    Returns:
        FLOPs (float).

    Example: body 3e6, head 4e7, 1,000 tokens of which 500 generated, 10 rows x 51 scored
    positions, stages {gen, update_actor}: gen = 2·3e6·1000 + 2·4e7·500 = 4.6e10, update =
    6·3e6·1000 + 6·4e7·510 = 1.404e11; total 1.864e11.
    """
    total = 0.0
    if "gen" in stages:
        total += 2.0 * (flops.n_body * tokens + flops.n_head * response_tokens)
    score = 2.0 * (flops.n_body * tokens + flops.n_head * padded_rows)
    total += score * sum(s in stages for s in ("old_log_prob", "ref"))
    if "values" in stages:
        total += 2.0 * critic_body * tokens
    if "update_critic" in stages:
        total += 6.0 * critic_body * tokens
    if "update_actor" in stages:
        total += 6.0 * ppo_epochs * (flops.n_body * tokens + flops.n_head * padded_rows)
    return total


def measure_matmul_peak(size: int = 1024, repeats: int = 20, dtype: torch.dtype = torch.float32) -> float:
    """Peak matmul FLOP/s of this machine at the current torch thread count: best of ``repeats``.

    The best single run (not the mean) estimates what the hardware can do when the shared machine
    leaves it alone; 2·size³ FLOPs per square matmul.
    """
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    out = torch.empty(size, size, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up: BLAS thread pool, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


class RssSampler:
    """Peak resident set size of this process between `start` and `stop`, sampled every 20 ms."""

    def __init__(self, interval_s: float = 0.02) -> None:
        import psutil

        self._proc, self._interval = psutil.Process(), interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._proc.memory_info().rss)
            self._stop.wait(self._interval)

    def start(self) -> RssSampler:
        """Begin sampling (the peak keeps accumulating across start/stop pairs)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling; returns the peak in bytes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self._proc.memory_info().rss)
        return self.peak_bytes


@dataclass
class StepRecord:
    """One measured step (verl's or the peer's)."""

    seconds: float
    generated_tokens: float
    trained_tokens: float
    critic_tokens: float = 0.0
    flops: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """The product documents' tokens/s: (generated + critic-forward + trained) / step time."""
        return (self.generated_tokens + self.critic_tokens + self.trained_tokens) / self.seconds



def flop_model_of(model_path: str) -> FlopModel:
    """`FlopModel` of a model directory (or ``builtin://`` name), built on the meta device (no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.modules.factory import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model_path))
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(config)
    return FlopModel.from_module(module)

