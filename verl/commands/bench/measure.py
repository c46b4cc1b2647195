"""Measurement pieces shared by `verl bench` and its TRL peer (`verl.commands.bench.trl`).

FLOP model of a step, the machine's measured matmul peak, a peak-RSS sampler and one step's
record; kept apart from `verl.commands.bench.bench` so the peer imports them without importing the
bench's driver (no import cycle).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

__all__ = [
    "STAGE_KEYS",
    "FlopModel",
    "LinearShape",
    "RssSampler",
    "StepRecord",
    "attainable_seconds",
    "flop_model_of",
    "measure_linear_throughput",
    "measure_matmul_peak",
    "part_shapes",
    "step_flop_parts",
    "step_flops",
]

STAGE_KEYS = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")


@dataclass(frozen=True)
class FlopModel:
    """Parameter counts that set the FLOPs of one token.

    Attributes:
        n_body: parameters every token's forward multiplies with (layers, final norm): all
            parameters minus the embedding table(s).
        n_head: parameters of the LM head (``vocab_size · hidden_size``), tied or not.
        hidden: hidden size H (0 = unknown: no attainable bound).
        intermediate: MLP width I, the body matmul shape the attainable bound measures.
        vocab: V.
    """

    n_body: int
    n_head: int
    hidden: int = 0
    intermediate: int = 0
    vocab: int = 0

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
        hidden, vocab = int(cfg.hidden_size), int(cfg.vocab_size)
        intermediate = int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * hidden)
        return cls(
            n_body=total - (head if tied else 2 * head),
            n_head=head,
            hidden=hidden,
            intermediate=intermediate,
            vocab=vocab,
        )


def step_flop_parts(
    flops: FlopModel,
    tokens: float,
    response_tokens: float,
    padded_rows: float,
    stages: set[str],
    ppo_epochs: int = 1,
    critic_body: int = 0,
) -> dict[str, float]:
    """FLOPs of one RL step's model work, by the matmul shape that does it (module docstring's rule).

    Parts: ``prefill_body`` (2·N_body per prompt token), ``decode_body`` / ``decode_head`` (2·N
    per generated token, B rows per matmul), ``score_body`` / ``score_head`` (2·N per token /
    scored position, per old-log-prob or reference pass), ``train_body`` / ``train_head`` (6·N,
    forward + backward, per PPO epoch), ``critic_forward`` (2·N_critic per token) and
    ``critic_train`` (6·N_critic). Zero parts are left out.

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
        {part: FLOPs}; the values sum to `step_flops`.
    """
    parts: dict[str, float] = {}
    if "gen" in stages:
        parts["prefill_body"] = 2.0 * flops.n_body * (tokens - response_tokens)
        parts["decode_body"] = 2.0 * flops.n_body * response_tokens
        parts["decode_head"] = 2.0 * flops.n_head * response_tokens
    passes = sum(s in stages for s in ("old_log_prob", "ref"))
    parts["score_body"] = 2.0 * passes * flops.n_body * tokens
    parts["score_head"] = 2.0 * passes * flops.n_head * padded_rows
    parts["critic_forward"] = 2.0 * critic_body * tokens if "values" in stages else 0.0
    parts["critic_train"] = 6.0 * critic_body * tokens if "update_critic" in stages else 0.0
    if "update_actor" in stages:
        parts["train_body"] = 6.0 * ppo_epochs * flops.n_body * tokens
        parts["train_head"] = 6.0 * ppo_epochs * flops.n_head * padded_rows
    return {k: v for k, v in parts.items() if v}


def step_flops(
    flops: FlopModel,
    tokens: float,
    response_tokens: float,
    padded_rows: float,
    stages: set[str],
    ppo_epochs: int = 1,
    critic_body: int = 0,
) -> float:
    """FLOPs of one RL step's model work: the sum of `step_flop_parts` (same arguments).

    Example: body 3e6, head 4e7, 1,000 tokens of which 500 generated, 10 rows x 51 scored
    positions, stages {gen, update_actor}: gen = 2·3e6·1000 + 2·4e7·500 = 4.6e10, update =
    6·3e6·1000 + 6·4e7·510 = 1.404e11; total 1.864e11.
    """
    return float(
        sum(step_flop_parts(flops, tokens, response_tokens, padded_rows, stages, ppo_epochs, critic_body).values())
    )


@dataclass(frozen=True)
class LinearShape:
    """A ``y = x @ Wᵀ`` matmul: x `(rows, inner)`, W `(outer, inner)`; ``train`` adds its backward.

    With ``train`` the measured work is the forward and both backward matmuls (dx = g @ W,
    dW = gᵀ @ x), 3 · 2·rows·inner·outer FLOPs, as 6·N per trained token counts it.
    """

    rows: int
    inner: int
    outer: int
    train: bool = False

    @property
    def flops(self) -> float:
        """FLOPs of one measured repetition."""
        return 2.0 * self.rows * self.inner * self.outer * (3 if self.train else 1)


def part_shapes(
    flops: FlopModel,
    tokens: float,
    response_tokens: float,
    padded_rows: float,
    decode_rows: int,
    micro_batches: int = 1,
) -> dict[str, LinearShape]:
    """The matmul shape that stands for each `step_flop_parts` part, for the attainable bound.

    The body is represented by its MLP up-projection `(rows, H) @ (H, I)` (the largest body
    matmul), the LM head by `(rows, H) @ (H, V)`. Rows: the prompt tokens of a generation batch
    for the prefill, ``decode_rows`` (sequences decoded together) for decoding, the tokens /
    scored positions of one micro-batch (the step's divided by ``micro_batches``) for scoring
    and training.
    """
    h, i, v = flops.hidden, flops.intermediate, flops.vocab
    mb = max(int(micro_batches), 1)
    body_rows, head_rows = max(round(tokens / mb), 1), max(round(padded_rows / mb), 1)
    train_body = LinearShape(body_rows, h, i, train=True)
    return {
        "prefill_body": LinearShape(max(round(tokens - response_tokens), 1), h, i),
        "decode_body": LinearShape(decode_rows, h, i),
        "decode_head": LinearShape(decode_rows, h, v),
        "score_body": LinearShape(body_rows, h, i),
        "score_head": LinearShape(head_rows, h, v),
        "critic_forward": LinearShape(body_rows, h, i),
        "critic_train": train_body,
        "train_body": train_body,
        "train_head": LinearShape(head_rows, h, v, train=True),
    }


def measure_linear_throughput(
    shape: LinearShape, dtype: torch.dtype = torch.float32, repeats: int = 3, min_seconds: float = 0.3
) -> float:
    """FLOP/s this machine reaches on ``shape`` (``F.linear``, plus its backward matmuls when
    ``shape.train``): the best of at least ``repeats`` runs after one warm-up, repeated until
    ``min_seconds`` have passed (a decode-sized matmul takes microseconds: one run is noise)."""
    x = torch.randn(shape.rows, shape.inner, dtype=dtype)
    w = torch.randn(shape.outer, shape.inner, dtype=dtype)

    def once() -> None:
        y = torch.nn.functional.linear(x, w)
        if shape.train:  # y stands in for the output gradient: same shape, same cost
            torch.mm(y, w)
            torch.mm(y.t(), x)

    once()
    best, runs, start_all = float("inf"), 0, time.perf_counter()
    while runs < repeats or time.perf_counter() - start_all < min_seconds:
        start = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - start)
        runs += 1
    return shape.flops / best


def attainable_seconds(parts: dict[str, float], throughput: dict[str, float]) -> float:
    """Time the step's FLOPs take at the throughput their own matmul shapes reach here.

    ``Σ_part FLOPs_part / throughput_part``: the **attainable bound**. The issue's FLOP bound
    divides all FLOPs by the square-matmul peak, which skinny shapes (the LM head's
    `(B, 256) @ (256, 151936)` at decode) cannot reach on a CPU; this one can be reached by
    the matmuls as they are, so "% of the attainable bound" says how much time goes elsewhere.

    Example: parts {a: 2e9, b: 1e9} at {a: 1e9, b: 5e8} FLOP/s → 2 + 2 = 4 s.

    Raises:
        KeyError: a part without a measured throughput.
    """
    return float(sum(f / throughput[k] for k, f in parts.items()))


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
    flop_parts: dict[str, float] = field(default_factory=dict)

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
