"""Eager vs compiled decode step of the ``hf`` rollout engine (``rollout.enforce_eager``) on CPU.

The GSM8K bench shape: the random 42M-parameter Qwen2 ``small`` model (hidden 256, 4 layers,
vocabulary 151,936), 16 rows, exactly 64 response tokens (``ignore_eos``), fp32, per-row seeded
sampling at temperature 1 (the trainer's path). Each round generates once eagerly and once
compiled, with a new prompt length per round (so a recompile per shape would show); the first
compiled call includes the compile and is reported apart. Prints medians over the rounds after
the first: seconds per ``generate_sequences`` call (wall and process CPU time) and per
decode-step forward (sampling excluded), and whether both engines drew the same tokens. For the
cold compile time run it with an empty ``TORCHINDUCTOR_CACHE_DIR`` (Inductor caches compiled
kernels on disk across processes).

Usage: ``python benchmarks/bench_rollout_compile.py --model DIR [--rounds 6]`` (DIR: ``verl
init-model --arch qwen2 --size small --tokenizer <qwen2.5 tokenizer>``; ``verl bench --shape gsm8k
--work-dir W`` leaves one in ``W/qwen2-small``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from verl.config.schema import RolloutConfig
from verl.protocol import DataProto
from verl.workers.rollout import HFRollout
from verl.workers.rollout.hf.hf_decode import DecodeStep

ROWS, RESPONSE = 16, 64


def _prompts(vocab: int, longest: int, round_: int) -> DataProto:
    """16 left-padded random prompts, the longest ``longest`` tokens, with per-row sample seeds."""
    g = torch.Generator().manual_seed(round_)
    lengths = torch.randint(longest // 2, longest + 1, (ROWS,), generator=g)
    lengths[0] = longest
    ids = torch.randint(3, vocab - 1000, (ROWS, longest), generator=g)
    mask = (torch.arange(longest) >= (longest - lengths)[:, None]).long()
    ids = ids * mask
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "sample_seeds": torch.arange(ROWS, dtype=torch.long) + 1000 * round_,
        },
        non_tensors={"uid": np.array([str(i) for i in range(ROWS)], dtype=object)},
    )


def _timed_engine(model: torch.nn.Module, compiled: bool, step_times: list[float]) -> HFRollout:
    config = RolloutConfig(response_length=RESPONSE, ignore_eos=True, enforce_eager=not compiled, temperature=1.0)
    engine = HFRollout(model, config, eos_token_id=[2], pad_token_id=0)
    engine._decode = _TimedDecode(engine._decode, step_times)
    return engine


class _TimedDecode:
    """The engine's `DecodeStep`, recording the seconds of every decode-step forward."""

    def __init__(self, inner: DecodeStep, times: list[float]) -> None:
        self.inner, self.times = inner, times
        self.session = inner.session

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        start = time.perf_counter()
        logits = self.inner(*args, **kwargs)
        self.times.append(time.perf_counter() - start)
        return logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    steps = {"eager": [], "compiled": []}
    engines = {name: _timed_engine(model, name == "compiled", steps[name]) for name in steps}
    calls: dict[str, list[float]] = {"eager": [], "compiled": []}
    cpu: dict[str, list[float]] = {"eager": [], "compiled": []}  # process CPU time: less sensitive to other load
    step_medians: dict[str, list[float]] = {"eager": [], "compiled": []}
    step_sums: dict[str, list[float]] = {"eager": [], "compiled": []}  # all decode forwards of a call
    same = []
    for round_ in range(args.rounds):
        batch = _prompts(model.config.vocab_size, 96 + 8 * round_, round_)
        out = {}
        for name in ("eager", "compiled") if round_ % 2 == 0 else ("compiled", "eager"):
            steps[name].clear()
            start, cpu_start = time.perf_counter(), time.process_time()
            out[name] = engines[name].generate_sequences(batch)
            calls[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - cpu_start)
            step_medians[name].append(statistics.median(steps[name]))
            step_sums[name].append(sum(steps[name]))
        same.append(bool(torch.equal(out["eager"].batch["responses"], out["compiled"].batch["responses"])))
        diff = (out["eager"].batch["rollout_log_probs"] - out["compiled"].batch["rollout_log_probs"]).abs().max()
        print(
            f"round {round_}: eager {calls['eager'][-1]:.3f} s, compiled {calls['compiled'][-1]:.3f} s, "
            f"same tokens {same[-1]}, max |dlogp| {float(diff):.2e}",
            flush=True,
        )
    record = {
        "threads": torch.get_num_threads(),
        "generate_s": {k: statistics.median(v[1:]) for k, v in calls.items()},
        "generate_cpu_s": {k: statistics.median(v[1:]) for k, v in cpu.items()},
        "decode_step_s": {k: statistics.median(v[1:]) for k, v in step_medians.items()},
        "decode_forwards_per_call_s": {k: statistics.median(v[1:]) for k, v in step_sums.items()},
        "first_compiled_call_s": calls["compiled"][0],
        "compile_s_estimate": calls["compiled"][0] - statistics.median(calls["compiled"][1:]),
        "same_tokens_every_round": all(same),
    }
    record["speedup_generate"] = record["generate_s"]["eager"] / record["generate_s"]["compiled"]
    record["speedup_generate_cpu"] = record["generate_cpu_s"]["eager"] / record["generate_cpu_s"]["compiled"]
    record["speedup_decode_step"] = record["decode_step_s"]["eager"] / record["decode_step_s"]["compiled"]
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
