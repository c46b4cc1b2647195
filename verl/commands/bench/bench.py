"""``verl bench``: run N RL steps of a config and report throughput, stage times, MFU and memory.

Usage::

    verl bench                                   # the built-in quick-start task
    verl bench --shape gsm8k [--size small]      # random Qwen2 model, GSM8K prompts, 4 x n=4, 64 tokens
    verl bench my.yaml key=value ... --steps 6 --out bench.json
    verl bench --shape gsm8k --compare trl       # TRL's GRPOTrainer on the same shape, steps alternated
    verl bench --shape gsm8k --mode separate_async trainer.v1.separate_async.parameter_sync_step=1
                                                 # trainer.v1.trainer_mode (default: the config's)
    verl bench --mode colocate_async             # one pool: warm-up batches, the long tail cut and carried

What it prints (medians over the steps after the first, which warms up allocators and caches):

- **throughput** as verl's performance guide defines it:
  (rollout-generated tokens + critic-forward tokens + actor-update tokens) / step wall time.
- per-stage times (``timing_s/<stage>``) and, with Ray workers, the dispatch time
  (driver-side stage time minus the workers' own compute time) and ``timing_s/update_weights``.
- the **FLOP bound**: FLOPs of the work the step ran, counted as 2·N per token that goes through
  a forward (prefill, decode, old-log-prob / reference / critic scoring) and 6·N per trained token
  (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1). N is split into the
  transformer body and the (tied) LM head, and the head is counted only at the positions where it
  runs: every generated token, and the R + 1 scored positions of a row (``logits_to_keep``), never
  the prompt. Attention score FLOPs (≈ 2·layers·T·d per token) are left out: < 3 % at T ≤ 200.
  The bound is FLOPs / peak, with the peak **measured** by a float32 matmul benchmark on this
  machine at start-up, raised to the fastest step shape's throughput if one beats
  it (a disturbed start-up measurement); "% of bound" = bound time / measured step time (= MFU).
- the **attainable bound**: the same FLOPs, each part (prefill / decode / scoring / training, body
  or LM head) timed at the float32 throughput that part's own matmul shape reaches on this
  machine (measured after the warm-up step at the step's row counts: e.g. the LM head at B decode
  rows, `(B, H) @ (H, V)`, and at the scored positions with its backward matmuls);
  "% of the attainable bound" = attainable time / step time. The square-matmul peak is out of
  reach for the skinny LM-head shapes on a CPU, so the first figure says how close the step is
  to what these matmuls allow, the second (the issue's definition, kept) to the machine's peak.
- peak resident memory (RSS) of the process while the steps ran, sampled every 20 ms.

The JSON record (``--out``) holds the config overrides, every step's metrics, the medians, the
measured peak and, with ``--compare``, the peer's steps and the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from verl.commands.bench.measure import (  # noqa: F401  (re-exported: the bench API)
    STAGE_KEYS,
    FlopModel,
    LinearShape,
    RssSampler,
    StepRecord,
    attainable_seconds,
    flop_model_of,
    measure_linear_throughput,
    measure_matmul_peak,
    part_shapes,
    step_flop_parts,
    step_flops,
)

__all__ = [
    "FlopModel",
    "RssSampler",
    "StepRecord",
    "main",
    "measure_matmul_peak",
    "measure_shape_throughput",
    "shape_config",
    "step_flops",
    "summarize",
]

GSM8K_SHAPE = {"prompts": 4, "n": 4, "response_length": 64, "max_prompt_length": 256}


def prepare_gsm8k_shape(work_dir: Path, size: str, shared_dir: Path) -> tuple[Path, Path]:
    """Random Qwen2 model of ``size`` (Qwen2.5 tokenizer) and the GSM8K test parquet, cached in ``work_dir``."""
    from verl.data.prepare import main as prepare_main
    from verl.modules.init_model import init_random_model

    model_dir = work_dir / f"qwen2-{size}"
    if not (model_dir / "config.json").is_file():
        init_random_model("qwen2", size, shared_dir / "tokenizers" / "qwen2.5", model_dir, seed=0)
    data_dir = work_dir / "gsm8k"
    if not (data_dir / "test.parquet").is_file():
        if prepare_main(
            ["gsm8k", "--input", str(shared_dir / "data" / "gsm8k" / "test.jsonl"), "--out", str(data_dir)]
        ):
            raise RuntimeError("verl prepare gsm8k failed")
    return model_dir, data_dir / "test.parquet"


def shape_config(
    shape: str, work_dir: Path, steps: int, size: str = "small", shared_dir: Path | None = None
) -> tuple[str | None, list[str]]:
    """(config path or preset, overrides) of a named bench shape.

    ``builtin``: the quick-start preset (tiny built-in model, arithmetic task), no validation.
    ``gsm8k``: a random Qwen2 of ``size`` on GSM8K test prompts, 4 prompts x n=4, exactly 64-token
    responses (``ignore_eos``), float32, one optimizer step per batch, no KL.

    Raises:
        ValueError: unknown shape.
    """
    common = [
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "data.val_files=[]",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[]",
        "trainer.progress_bar=false",
        "trainer.plot=false",
        f"trainer.output_dir={work_dir / 'out'}",
        f"trainer.default_local_dir={work_dir / 'ckpt'}",
    ]
    if shape == "builtin":
        return "quickstart", common
    if shape != "gsm8k":
        raise ValueError(f"unknown bench shape {shape!r}; valid: builtin, gsm8k")
    shared = shared_dir or Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))
    model_dir, parquet = prepare_gsm8k_shape(work_dir, size, shared)
    s = GSM8K_SHAPE
    return None, [
        f"actor_rollout_ref.model.path={model_dir}",
        "algorithm.adv_estimator=grpo",
        f"data.train_files=[{parquet}]",
        f"data.train_batch_size={s['prompts']}",
        f"data.max_prompt_length={s['max_prompt_length']}",
        "data.filter_overlong_prompts=true",
        f"data.max_response_length={s['response_length']}",
        f"actor_rollout_ref.rollout.n={s['n']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s['prompts']}",
        "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=false",
        *common,
    ]


class VerlStepper:
    """Drives `RLTrainer.train_step` one batch at a time, so steps can alternate with a peer's.

    Args:
        config: a loaded `RootConfig`.
    """

    def __init__(self, config: Any) -> None:
        from verl.trainer import RLTrainer

        self.config = config
        self.trainer = RLTrainer(config=config)
        self.parts = self.trainer._parts()
        self._batches = iter(())
        self.flops = flop_model_of(config.actor_rollout_ref.model.path)
        critic = self.parts.critic_wg is not None
        self.critic_body = (
            flop_model_of(config.critic.model.path or config.actor_rollout_ref.model.path).n_body if critic else 0
        )
        self.history: list[dict[str, float]] = []

    def _next_batch(self) -> dict[str, Any]:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.parts.train_dataloader)
            return next(self._batches)

    def step(self) -> StepRecord:
        """One RL step; returns its `StepRecord` (the trainer's metrics are kept in ``history``)."""
        metrics = self.trainer.train_step(self._next_batch())
        self.trainer.global_step += 1
        return self.record(metrics)

    def record(self, metrics: dict[str, float]) -> StepRecord:
        """The `StepRecord` of a step's metrics (also kept in ``history``)."""
        cfg = self.config
        self.history.append(metrics)
        n_traj = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n
        tokens = metrics["perf/total_num_tokens"]
        generated = metrics["response_length/mean"] * n_traj
        stages = {k[len("timing_s/") :]: v for k, v in metrics.items() if k.startswith("timing_s/")}
        padded = n_traj * (cfg.data.max_response_length + 1)
        parts = step_flop_parts(
            self.flops, tokens, generated, padded, set(stages), cfg.actor_rollout_ref.actor.ppo_epochs, self.critic_body
        )
        return StepRecord(
            seconds=stages["step"],
            generated_tokens=generated,
            trained_tokens=tokens,
            critic_tokens=tokens if "values" in stages else 0.0,
            flops=float(sum(parts.values())),
            stages=stages,
            flop_parts=parts,
        )

    def shapes(self, record: StepRecord) -> dict[str, LinearShape]:
        """The matmul shape of each FLOP part of a step like ``record`` (`part_shapes`)."""
        cfg = self.config
        n_traj = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n
        actor = cfg.actor_rollout_ref.actor
        if actor.use_dynamic_bsz:
            micro = math.ceil(record.trained_tokens / max(actor.ppo_max_token_len_per_gpu, 1))
        else:
            micro = math.ceil(n_traj / (actor.ppo_micro_batch_size_per_gpu or n_traj))
        padded = n_traj * (cfg.data.max_response_length + 1)
        decode_rows = min(n_traj, max(int(cfg.actor_rollout_ref.rollout.max_num_seqs), 1))
        return part_shapes(self.flops, record.trained_tokens, record.generated_tokens, padded, decode_rows, micro)

    def close(self) -> None:
        """Release worker groups."""
        self.trainer.close()


class AsyncStepper(VerlStepper):
    """Steps of an async ``trainer.v1.trainer_mode``: with ``separate_async`` the rollout thread
    keeps generating between and during the steps, so a step's wall time is what the trainer waits
    plus trains; with ``colocate_async`` a step generates until the batch is finished (the long
    tail carried to the next step) and trains."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        from verl.trainer.async_rl import build_async_loop

        self.loop = build_async_loop(self.trainer)
        self._started = False

    def step(self) -> StepRecord:
        if not self._started:
            self._started = self.loop.start()
        return self.record(self.loop.step_once())

    def close(self) -> None:
        if self._started:
            self.loop.stop()
        super().close()


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def summarize(
    records: list[StepRecord], peak_flops: float, shape_throughput: dict[str, float] | None = None
) -> dict[str, float]:
    """Medians over the steps after the first (all steps if there is only one).

    Keys: ``step_s``, ``throughput`` (tokens/s), ``flops``, ``bound_s`` (FLOPs / peak),
    ``pct_of_bound`` (= MFU, %), with ``shape_throughput`` (FLOP/s per `step_flop_parts` part)
    also ``attainable_s`` (`attainable_seconds`) and ``pct_of_attainable`` (attainable time /
    step time, %), ``stage_s/<stage>``, and with Ray workers ``dispatch_s``
    (driver stage time minus the workers' compute time, gen + update) and ``update_weights_s``,
    ``ray_share_pct`` = (dispatch + weight sync) / step.
    """
    rows = records[1:] or records
    out = {
        "steps": float(len(rows)),
        "step_s": _median([r.seconds for r in rows]),
        "throughput": _median([r.throughput for r in rows]),
        "flops": _median([r.flops for r in rows]),
        "tokens": _median([r.generated_tokens + r.critic_tokens + r.trained_tokens for r in rows]),
    }
    out["bound_s"] = out["flops"] / peak_flops
    out["pct_of_bound"] = 100.0 * _median([r.flops / peak_flops / r.seconds for r in rows])
    if shape_throughput and all(r.flop_parts for r in rows):
        attain = [attainable_seconds(r.flop_parts, shape_throughput) for r in rows]
        out["attainable_s"] = _median(attain)
        out["pct_of_attainable"] = 100.0 * _median([a / r.seconds for a, r in zip(attain, rows, strict=True)])
    for key in sorted({k for r in rows for k in r.stages}):
        out[f"stage_s/{key}"] = _median([r.stages.get(key, 0.0) for r in rows])
    if any("generate_sequences" in r.stages for r in rows):

        def dispatch(r: StepRecord) -> float:
            s = r.stages
            gen = s.get("gen", 0.0) - s.get("generate_sequences", s.get("gen", 0.0))
            upd = s.get("update_actor", 0.0) - s.get("update_actor_worker", s.get("update_actor", 0.0))
            return max(gen, 0.0) + max(upd, 0.0)

        def sync(r: StepRecord) -> float:
            return r.stages.get("update_weights", r.stages.get("weight_sync", 0.0))

        out["dispatch_s"] = _median([dispatch(r) for r in rows])
        out["update_weights_s"] = _median([sync(r) for r in rows])
        out["ray_share_pct"] = 100.0 * _median([(dispatch(r) + sync(r)) / r.seconds for r in rows])
    return out


def format_summary(name: str, s: dict[str, float], peak_rss: int) -> str:
    """Human-readable block of `summarize`'s figures."""
    lines = [
        f"[{name}] median of {int(s['steps'])} steps after the first: step {s['step_s']:.3f} s, "
        f"{s['tokens']:.0f} tokens -> throughput {s['throughput']:.1f} tokens/s",
        f"[{name}] FLOPs/step {s['flops'] / 1e9:.1f} GFLOP, bound {s['bound_s']:.3f} s -> "
        f"{s['pct_of_bound']:.1f} % of the FLOP bound (MFU); peak RSS {peak_rss / 2**20:.0f} MiB",
    ]
    if "attainable_s" in s:
        lines.append(
            f"[{name}] attainable bound (FLOPs at the throughput of their own matmul shapes here) "
            f"{s['attainable_s']:.3f} s -> {s['pct_of_attainable']:.1f} % of the attainable bound"
        )
    stages = {k.split("/", 1)[1]: v for k, v in s.items() if k.startswith("stage_s/") and k != "stage_s/step"}
    if stages:
        lines.append(f"[{name}] stages: " + ", ".join(f"{k} {v:.3f}s" for k, v in stages.items()))
    if "dispatch_s" in s:
        lines.append(
            f"[{name}] dispatch {s['dispatch_s']:.3f} s + update_weights {s['update_weights_s']:.3f} s "
            f"= {s['ray_share_pct']:.1f} % of the step"
        )
    return "\n".join(lines)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verl bench", description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="*", help="[CONFIG] [key=value ...] (CONFIG: YAML file or preset)")
    parser.add_argument(
        "--shape",
        choices=("builtin", "gsm8k"),
        default=None,
        help="named shape (default builtin when no CONFIG is given)",
    )
    parser.add_argument("--size", default="small", help="random-model size for --shape gsm8k (verl init-model sizes)")
    parser.add_argument("--steps", type=int, default=6, help="steps per side (the first is warm-up)")
    parser.add_argument(
        "--compare", choices=("trl",), default=None, help="also run a peer on the same shape, alternately"
    )
    parser.add_argument("--work-dir", default=None, help="cache for the random model and parquet (default: a temp dir)")
    parser.add_argument("--out", default=None, help="JSON record path")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--mode",
        choices=("sync", "separate_async", "colocate_async"),
        default=None,
        help="trainer.v1.trainer_mode to bench (default: the config's)",
    )
    ns = parser.parse_args(argv)
    if ns.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")
    return ns


def _load(ns: argparse.Namespace, work_dir: Path) -> tuple[Any, list[str], str]:
    from verl.config import load_config

    path, overrides = None, [a for a in ns.args if "=" in a]
    positional = [a for a in ns.args if "=" not in a]
    if len(positional) > 1:
        raise SystemExit(f"verl bench: at most one CONFIG, got {positional}")
    shape = ns.shape or ("builtin" if not positional else "config")
    if shape == "config":
        path = positional[0]
        overrides = [
            f"trainer.total_training_steps={ns.steps}",
            "trainer.save_freq=-1",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "trainer.progress_bar=false",
            "trainer.plot=false",
            *overrides,
        ]
    else:
        if positional:
            raise SystemExit("verl bench: give either CONFIG or --shape, not both")
        path, base = shape_config(shape, work_dir, ns.steps, ns.size)
        overrides = [*base, *overrides]
    if ns.mode not in (None, "sync"):
        # one weight sync per step unless the overrides say otherwise (verl: train = sync x mini)
        base_cfg = load_config(path, overrides)
        sync = base_cfg.data.train_batch_size // base_cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        overrides = [f"trainer.v1.separate_async.parameter_sync_step={sync}", *overrides]
    if ns.mode is not None:
        overrides = [f"trainer.v1.trainer_mode={ns.mode}", *overrides]
    return load_config(path, overrides), overrides, shape


def measure_shape_throughput(shapes: dict[str, LinearShape], flops: FlopModel) -> dict[str, float]:
    """FLOP/s of each part's matmul shape (`measure_linear_throughput`), printed; {} when the model's
    sizes are unknown. Parts sharing a shape are measured once."""
    if not (flops.hidden and flops.intermediate and flops.vocab):
        return {}
    measured: dict[LinearShape, float] = {}
    for shape in shapes.values():
        if shape not in measured:
            measured[shape] = measure_linear_throughput(shape)
    out = {part: measured[shape] for part, shape in shapes.items()}
    print(
        "float32 throughput of the step's own matmul shapes (GFLOP/s): "
        + ", ".join(
            f"{part} {shape.rows}x{shape.inner}x{shape.outer}{' +bwd' if shape.train else ''} {out[part] / 1e9:.1f}"
            for part, shape in shapes.items()
        ),
        flush=True,
    )
    return out


def run_bench(ns: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    """Run the benchmark described by the parsed arguments; returns the JSON record."""
    cfg, overrides, shape = _load(ns, work_dir)
    if ns.compare is not None and cfg.trainer.v1.trainer_mode != "sync":
        raise SystemExit(
            "verl bench: --compare alternates single steps; an async mode keeps generating between them, "
            "so compare modes with benchmarks/bench_async_modes.py instead"
        )
    peak = measure_matmul_peak()
    print(f"measured float32 matmul peak: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads)", flush=True)
    stepper = VerlStepper(cfg) if cfg.trainer.v1.trainer_mode == "sync" else AsyncStepper(cfg)
    rss_verl = RssSampler()
    ours: list[StepRecord] = []

    def verl_step() -> None:
        rss_verl.start()
        ours.append(stepper.step())
        rss_verl.stop()
        print(f"  verl step {len(ours)}: {ours[-1].seconds:.3f} s, {ours[-1].throughput:.1f} tokens/s", flush=True)

    record: dict[str, Any] = {
        "shape": shape,
        "overrides": overrides,
        "steps": ns.steps,
        "peak_flops": peak,
        "threads": torch.get_num_threads(),
        "loadavg_start": os.getloadavg(),
    }
    throughput: dict[str, float] = {}
    try:
        verl_step()  # warm-up: it also gives the token counts that set the matmul shapes
        throughput = measure_shape_throughput(stepper.shapes(ours[0]), stepper.flops)
        record["shape_throughput"] = throughput
        if throughput and max(throughput.values()) > peak:  # the start-up measurement was disturbed
            peak = record["peak_flops"] = max(throughput.values())
            print(
                f"peak raised to the fastest step shape's {peak / 1e9:.1f} GFLOP/s (a peak is never below a "
                f"measured shape)",
                flush=True,
            )
        if ns.compare is None:
            for _ in range(ns.steps - 1):
                verl_step()
        else:
            from verl.commands.bench.trl import run_trl

            theirs, rss_peer = run_trl(cfg, ns.steps, after_each_step=verl_step)  # one verl step after each
            record["peer"] = {
                "name": ns.compare,
                "steps": [asdict(r) for r in theirs],
                "summary": summarize(theirs, peak, throughput),
                "peak_rss_bytes": rss_peer,
            }
    finally:
        stepper.close()
    summary = summarize(ours, peak, throughput)
    record.update(
        {
            "summary": summary,
            "peak_rss_bytes": rss_verl.peak_bytes,
            "steps_detail": [asdict(r) for r in ours],
            "metrics": stepper.history,
            "loadavg_end": os.getloadavg(),
        }
    )
    print(format_summary("verl", summary, rss_verl.peak_bytes))
    if "peer" in record:
        peer = record["peer"]
        print(format_summary(peer["name"], peer["summary"], peer["peak_rss_bytes"]))
        record["ratio"] = summary["throughput"] / peer["summary"]["throughput"]
        print(f"throughput ratio verl / {peer['name']} = {record['ratio']:.2f}x (medians, steps alternated)")
    return record


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``verl bench``; returns the exit status."""
    ns = _parse(list(sys.argv[1:] if argv is None else argv))
    if ns.threads:
        torch.set_num_threads(ns.threads)
    with tempfile.TemporaryDirectory(prefix="verl-bench-") as tmp:
        work_dir = Path(ns.work_dir) if ns.work_dir else Path(tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        record = run_bench(ns, work_dir)
    if ns.out:
        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(json.dumps(record, indent=1, default=float))
        print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
