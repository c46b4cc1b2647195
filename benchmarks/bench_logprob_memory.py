"""Peak extra memory of token log-probs: naive full log-softmax vs verl's chunked kernel.

Given float32 logits of N = 4096 tokens over V = 151936 (Qwen2 vocabulary; 2.5 GB), compare

- ``naive``:            ``torch.log_softmax(logits.float(), -1).gather(-1, labels)``
- ``chunked``:          ``verl.algorithms.logprobs_and_entropy_from_logits`` (log-probs only)
- ``chunked+entropy``:  the same, also returning the per-token entropy

Each method runs in a fresh subprocess. On CPU the extra memory is the growth of the process's
resident-set high-water mark (``resource.getrusage(...).ru_maxrss``) from just after the logits
are created to just after the method returns; torch's allocator is invisible to tracemalloc. With
``--device cuda`` it is ``torch.cuda.max_memory_allocated`` minus the memory held before.

Usage:
    python benchmarks/bench_logprob_memory.py [--n 4096] [--vocab 151936] [--chunk-size 512]
                                              [--device cpu|cuda]

Exits with status 1 if the chunked kernel does not use less than half the naive extra memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from verl.algorithms import logprobs_and_entropy_from_logits

METHODS = ("naive", "chunked", "chunked+entropy")


def _peak_bytes(device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _run_method(method: str, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if method == "naive":
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    logp, _ = logprobs_and_entropy_from_logits(
        logits, labels, chunk_size=chunk_size, compute_entropy=method == "chunked+entropy"
    )
    return logp


def child(method: str, n: int, vocab: int, chunk_size: int, device: str) -> dict[str, float]:
    """Measure one method in this (fresh) process; returns a JSON-able record."""
    torch.manual_seed(0)
    logits = torch.randn(n, vocab, dtype=torch.float32, device=device)
    labels = torch.randint(0, vocab, (n,), device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = int(torch.cuda.memory_allocated())
    else:
        before = _peak_bytes(device)
    start = time.perf_counter()
    with torch.no_grad():
        logp = _run_method(method, logits, labels, chunk_size)
    peak = _peak_bytes(device)
    seconds = time.perf_counter() - start
    return {
        "method": method,
        "extra_mib": (peak - before) / 2**20,
        "logits_mib": logits.numel() * logits.element_size() / 2**20,
        "seconds": seconds,
        "checksum": float(logp.double().sum()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.vocab, args.chunk_size, args.device)))
        return 0

    rows = []
    for method in METHODS:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            method,
            "--n",
            str(args.n),
            "--vocab",
            str(args.vocab),
            "--chunk-size",
            str(args.chunk_size),
            "--device",
            args.device,
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))

    print(
        f"N={args.n} V={args.vocab} fp32 logits {rows[0]['logits_mib']:.0f} MiB, "
        f"chunk_size={args.chunk_size}, device={args.device}"
    )
    print(f"{'method':<18}{'peak extra MiB':>16}{'seconds':>10}{'sum log p':>16}")
    for r in rows:
        print(f"{r['method']:<18}{r['extra_mib']:>16.1f}{r['seconds']:>10.2f}{r['checksum']:>16.2f}")
    naive, chunked = rows[0]["extra_mib"], rows[1]["extra_mib"]
    ratio = chunked / naive if naive > 0 else float("inf")
    print(f"chunked / naive extra memory = {ratio:.3f} (x{1 / ratio:.1f} less)")
    agree = abs(rows[0]["checksum"] - rows[1]["checksum"]) <= 1e-6 * abs(rows[0]["checksum"]) + 1e-2
    print(f"log-prob sums agree: {agree}")
    return 0 if ratio < 0.5 and agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
