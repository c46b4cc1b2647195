"""Cost of the weight-sync attestation on the GSM8K bench shape's model, next to the sync it checks.

In one process, on the random 42M-parameter Qwen2 ``small`` of ``verl bench --shape gsm8k``
(Qwen2.5 vocabulary): an actor module and a rollout copy (the ``hf`` engine's in-place copy, as
with ``hybrid_engine=false`` or FSDP2 workers), alternated ``--reps`` times:

* ``sync``: `verl.workers.rollout_sync.sync_in_place` of the trainable parameters (what a step's sync moves);
* ``fingerprints``: both sides' fingerprints and their comparison (every sync);
* ``canary``: the canary scored on both sides (every ``sync_check.canary_every`` syncs).

Prints the medians and the per-sync cost at a given ``canary_every``; divide by a step time of
``verl bench --shape gsm8k`` on the same machine for the share of a step.

Usage: ``python benchmarks/bench_sync_attest.py [--reps 7] [--canary-every 10] [--work-dir W]``
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import torch

from verl.config.schema import ModelConfig
from verl.modules import create_model
from verl.modules.init_model import init_random_model
from verl.workers.rollout_sync import sync_in_place
from verl.workers.sync_attest import (
    canary_ids,
    compare_fingerprints,
    expected_fingerprints,
    module_canary,
    module_tensors,
)
from verl.workers.sync_attest_sides import module_fingerprints, vocab_size


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--canary-every", type=int, default=10)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--shared", default="/work/shared")
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-attest-"))
    model_dir = work / "qwen2-small"
    if not (model_dir / "config.json").exists():
        init_random_model("qwen2", "small", Path(args.shared) / "tokenizers" / "qwen2.5", model_dir, seed=0)
    actor = create_model("actor", ModelConfig(path=str(model_dir)))
    rollout = copy.deepcopy(actor).requires_grad_(False)
    ids = canary_ids(vocab_size(actor))

    def fingerprints() -> None:
        actual = module_fingerprints(rollout)
        assert not compare_fingerprints(expected_fingerprints(module_tensors(actor), actual), actual)

    def canary() -> None:
        module_canary(actor, ids), module_canary(rollout, ids)

    times: dict[str, list[float]] = {"sync": [], "fingerprints": [], "canary": []}
    canary()  # warm-up
    for _ in range(args.reps):
        with torch.no_grad():
            for p in actor.parameters():
                p.add_(1e-4)
        times["sync"].append(_timed(lambda: sync_in_place(actor, rollout, trainable_only=True)))
        times["fingerprints"].append(_timed(fingerprints))
        times["canary"].append(_timed(canary))
    med = {k: statistics.median(v) for k, v in times.items()}
    per_sync = med["fingerprints"] + (med["canary"] / args.canary_every if args.canary_every else 0.0)
    print(
        f"tensors {len(module_fingerprints(rollout))}, "
        f"parameters {sum(p.numel() for p in actor.parameters()) / 1e6:.1f}M, "
        f"reps {args.reps}"
    )
    print("medians (s): " + ", ".join(f"{k} {v:.4f}" for k, v in med.items()))
    print(
        f"attestation per sync at canary_every={args.canary_every}: {per_sync:.4f} s "
        f"({per_sync / med['sync']:.2f}x the sync itself)"
    )


if __name__ == "__main__":
    main()
