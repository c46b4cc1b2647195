"""Streaming rewards: how much of a slow reward's time generation hides.

Setup: the GSM8K bench shape (random 42M-parameter Qwen2 ``small``, 151,936-token vocabulary,
4 GSM8K test prompts x n=4 = 16 trajectories, 64-token responses, float32, ``hf`` engine) and
the ``naive`` reward manager with a custom function that sleeps 50 ms per sample, then scores with
the GSM8K rule (16 x 50 ms = 0.8 s of reward per batch when scored one after another).

Two scenarios, each run synchronously (generate, then score) and streaming, alternated per round:

* ``in_call``: one generation call of 16 rows with ``rollout.max_num_seqs=4`` (the engine decodes
  4 rows at a time); streaming (what `generate_and_score` does): the rows of a finished
  micro-batch are scored while the next ones decode.
* ``pipelined``: ``--batches`` (3) generation calls in a row (what the async rollouter does); streaming = each
  call's rows submitted to the scorer as they finish, the next call starting at once.

hidden share = 1 - (streaming: wait for the scores after the last generation call returned) /
(synchronous: time spent scoring after generation), i.e. the share of the reward time that no
longer adds to the step. It is measured on the tail, not on the difference of the two wall times:
on this shared 2-core machine the generation's own run-to-run noise (seconds) is larger than the
0.8 s of reward. Reported: medians over rounds, with the machine load; both walls are recorded.

Usage::

    python benchmarks/bench_streaming_reward.py --rounds 3 --out benchmarks/bench_streaming_reward.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.reward import create_reward_manager, default_compute_score
from verl.reward.streaming import StreamingRewardScorer, merge_scored
from verl.commands.bench.bench import GSM8K_SHAPE, prepare_gsm8k_shape

SLEEP_S = 0.05


def slow_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """The GSM8K rule after a 50 ms sleep (a verifier round trip)."""
    time.sleep(SLEEP_S)
    return float(default_compute_score(data_source, solution_str, ground_truth, extra_info))


def build(work_dir: Path, max_num_seqs: int) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.config.schema import RolloutConfig
    from verl.workers.rollout import HFRollout

    model_dir, _ = prepare_gsm8k_shape(work_dir, "small", Path(os.environ.get("VERL_SHARED_DIR", "/work/shared")))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    cfg = RolloutConfig(
        response_length=GSM8K_SHAPE["response_length"],
        prompt_length=GSM8K_SHAPE["max_prompt_length"],
        ignore_eos=True,
        max_num_seqs=max_num_seqs,
        seed=0,
    )
    return HFRollout(model, cfg, tok), tok


def prompt_batch(tok: Any, start: int, shared: Path) -> DataProto:
    """4 GSM8K test prompts from row ``start``, each repeated n=4 times, left-padded."""
    rows = [
        json.loads(line)
        for line in (shared / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()[start : start + 4]
    ]
    n = GSM8K_SHAPE["n"]
    repeated = [r for r in rows for _ in range(n)]
    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": r["question"]}], add_generation_prompt=True, tokenize=False
        )
        for r in repeated
    ]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, ids))
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    gts = np.empty(len(ids), dtype=object)
    for k, r in enumerate(repeated):
        gts[k] = {"ground_truth": r["answer"].split("####")[-1].strip()}
    return DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": mask,
            "sample_seeds": torch.arange(start * 100, start * 100 + len(ids), dtype=torch.long),
        },
        non_tensors={"data_source": np.array(["openai/gsm8k"] * len(ids), dtype=object), "reward_model": gts},
    )


def run_sync(engine: Any, manager: Any, batches: list[DataProto]) -> dict[str, float]:
    start, reward_s = time.perf_counter(), 0.0
    for batch in batches:
        out = engine.generate_sequences(batch)
        t0 = time.perf_counter()
        manager(out, return_dict=True)
        reward_s += time.perf_counter() - t0
    return {"wall_s": time.perf_counter() - start, "reward_s": reward_s}


def run_streaming(engine: Any, manager: Any, batches: list[DataProto], workers: int) -> dict[str, float]:
    """Each call's rows go to the scorer as they finish (the engine's finish hook), the next call
    starts at once; ``tail_s`` = the wait for the scores after the last generation ended."""
    start = time.perf_counter()
    with StreamingRewardScorer(manager, max_workers=workers) as scorer:
        pending: list[tuple[list[Any], int]] = []

        def hook(rows: list[int], data: DataProto) -> None:
            pending[-1][0].extend(scorer.submit_each(data, rows))

        engine.on_trajectories_finished = hook
        try:
            for batch in batches:
                pending.append(([], len(batch)))
                engine.generate_sequences(batch)
        finally:
            engine.on_trajectories_finished = None
        generated = time.perf_counter()
        for futures, n in pending:
            merge_scored(futures, n, GSM8K_SHAPE["response_length"])
        done = time.perf_counter()
    return {"wall_s": done - start, "tail_s": done - generated, "busy_s": scorer.busy_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batches", type=int, default=3, help="generation calls of the pipelined scenario")
    parser.add_argument("--scenarios", default="in_call,pipelined", help="comma-separated subset to run")
    parser.add_argument("--work-dir", default="/tmp/verl-bench-stream")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shared = Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))
    engine, tok = build(Path(args.work_dir), max_num_seqs=4)
    manager = create_reward_manager("naive", tok, compute_score=slow_score, timeout_s=5.0)
    scenarios = {
        "in_call": [prompt_batch(tok, 0, shared)],
        "pipelined": [prompt_batch(tok, 4 * i, shared) for i in range(args.batches)],
    }
    scenarios = {k: v for k, v in scenarios.items() if k in args.scenarios.split(",")}
    engine.generate_sequences(next(iter(scenarios.values()))[0])  # warm-up (allocations, head layout)
    rounds: dict[str, list[dict[str, float]]] = {k: [] for k in scenarios}
    for r in range(args.rounds):
        for name, batches in scenarios.items():
            load = os.getloadavg()[0]
            sync = run_sync(engine, manager, batches)
            stream = run_streaming(engine, manager, batches, args.workers)
            hidden = 1.0 - stream["tail_s"] / sync["reward_s"]
            rounds[name].append(
                {
                    "sync_wall_s": sync["wall_s"],
                    "sync_reward_s": sync["reward_s"],
                    "stream_wall_s": stream["wall_s"],
                    "stream_tail_s": stream["tail_s"],
                    "stream_scoring_busy_s": stream["busy_s"],
                    "hidden_share": hidden,
                    "loadavg": load,
                }
            )
            print(
                f"round {r} {name}: sync {sync['wall_s']:.2f} s (reward {sync['reward_s']:.2f} s), streaming "
                f"{stream['wall_s']:.2f} s (reward tail {stream['tail_s']:.3f} s) -> hidden {100 * hidden:.1f} % "
                f"(load {load:.1f})",
                flush=True,
            )
            summary = {n: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for n, rs in rounds.items() if rs}
            record = {
                "setup": {
                    "shape": GSM8K_SHAPE,
                    "sleep_s": SLEEP_S,
                    "workers": args.workers,
                    "max_num_seqs": 4,
                    "pipelined_batches": args.batches,
                    "torch_threads": 1,
                },
                "rounds": rounds,
                "median": summary,
            }
            if args.out:  # written after every measurement: a killed run keeps what it measured
                Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
