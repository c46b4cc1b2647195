#!/usr/bin/env python3
"""Run verl's current example scripts (copies in this folder) for one step on CPU; record pass/fail.

Each ``*.sh`` here is a verbatim copy of a verl script (verl-project/verl at 1dda039, Apache-2.0;
the header line names its source). Only what a user changes on a new machine is set:

- the environment variables the script itself reads: ``MODEL_PATH`` and ``REWARD_MODEL_PATH`` (a tiny random model),
  ``INFER_BACKEND``/``ENGINE``=hf, GPU counts (``NGPUS_PER_NODE``, ``NUM_GPUS``) = 1, sizes
  (``TRAIN_BATCH_SIZE``, ``PPO_MINI_BATCH_SIZE``, ``MAX_PROMPT_LENGTH``, ``MAX_RESPONSE_LENGTH``,
  ``ROLLOUT_N``, ``ROLLOUT_TP``, token budgets), ``VERL_USE_UV=0``;
- ``TRAIN_FILE`` / ``TEST_FILE`` / ``VAL_FILE`` (scripts reading them) name the GSM8K / MATH files below;
- ``HOME`` points at a folder holding ``data/gsm8k`` and ``data/math`` parquet files in verl's
  layout (built from /work/shared/data with ``verl.data.prepare``), so the scripts' own
  ``$HOME/data/...`` paths are used as written;
- appended overrides: ``trainer.device=cpu trainer.total_training_steps=1
  actor_rollout_ref.rollout.name=hf trainer.n_gpus_per_node=1`` (and the sizes again, for the
  scripts that hard-code them); scripts that do not forward ``"$@"`` (verl's experimental async ones)
  get them through ``python``/``python3`` shims on ``PATH``, with the keys of their own GPU split
  (``EXTRA_OVERRIDES``).

Usage: ``python examples/verl_scripts/current/run_all.py [--only NAME ...] [--out results.json]``.
Writes ``results.json`` (name -> pass/fail, seconds, last error line) beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SHARED = Path(os.environ.get("VERL_SHARED_DIR", ROOT.parent / "shared"))
ROWS = 8

SIZES = {
    "TRAIN_BATCH_SIZE": "2",
    "PPO_MINI_BATCH_SIZE": "2",
    "MAX_PROMPT_LENGTH": "1024",
    "MAX_RESPONSE_LENGTH": "8",
    "MAX_PROMPT_LEN": "1024",
    "MAX_RESPONSE_LEN": "8",
    "PPO_MAX_TOKEN_LEN_PER_GPU": "4096",
    "ROLLOUT_N": "2",
    "ROLLOUT_TP": "1",
    "NGPUS_PER_NODE": "1",
    "NUM_GPUS": "1",
    "NNODES": "1",
    "INFER_BACKEND": "hf",
    "ENGINE": "hf",
    "VERL_USE_UV": "0",
    "GEN_TP": "1",
    "SP_SIZE": "1",
    "TOTAL_TRAIN_STEPS": "1",
    "TOTAL_EPOCHS": "1",
}
OVERRIDES = [
    "trainer.device=cpu",
    "trainer.total_training_steps=1",
    "actor_rollout_ref.rollout.name=hf",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "data.max_response_length=8",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "trainer.save_freq=-1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
]
# verl's experimental async scripts split the GPUs themselves (``NGPUS_PER_NODE - n_gpus_rollout``) and
# size the rollout pool with ``rollout.*`` keys: one rollout worker; the hard-coded sizes again (sequence
# parallel 1 and FSDP size -1, i.e. all, on one worker; fully async: one mini-batch per weight sync, a rollout
# budget of one batch).
EXTRA_OVERRIDES = {
    "experimental_one_step_off_policy": [
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1",
    ],
    "experimental_fully_async_policy": [
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        "rollout.total_rollout_steps=2",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=1",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1",
    ],
}


def overrides_for(script: Path) -> list[str]:
    """The appended overrides for ``script``: OVERRIDES plus its folder's EXTRA_OVERRIDES."""
    extra = [v for prefix, keys in EXTRA_OVERRIDES.items() if script.name.startswith(prefix) for v in keys]
    return OVERRIDES + extra


def python_shim(script: Path, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """For a script that does not forward ``"$@"``, put ``python``/``python3`` shims first on PATH that
    append the overrides to its one ``python -m ...`` command line (the same overrides, nothing else)."""
    if '"$@"' in script.read_text():
        return env
    real = Path(sys.executable)
    tail = " ".join(shlex.quote(o) for o in overrides_for(script))
    shim = cwd / "shim"
    shim.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        (shim / name).write_text(f'#!/bin/sh\nexec {shlex.quote(str(real))} "$@" {tail}\n')
        (shim / name).chmod(0o755)
    return {**env, "PATH": f"{shim}{os.pathsep}{env['PATH']}"}


def make_home(root: Path) -> Path:
    """``$HOME/data/{gsm8k,math}/{train,test}.parquet`` in verl's layout."""
    from verl.data.prepare import convert_file, write_parquet

    home = root / "home"
    for task, name in (("gsm8k", "gsm8k"), ("math500", "math")):
        source = SHARED / "data" / task / "test.jsonl"
        for split in ("train", "test"):
            rows = convert_file(task, source, split)
            rows = rows[:ROWS] if split == "train" else rows[ROWS : 2 * ROWS]
            write_parquet(rows, home / "data" / name / f"{split}.parquet")
    return home


def make_model(root: Path) -> Path:
    from verl.modules.builtin import load_builtin_tokenizer
    from verl.modules.init_model import init_random_model

    load_builtin_tokenizer().save_pretrained(str(root / "tokenizer"))
    return Path(init_random_model("llama", "tiny", root / "tokenizer", root / "model", seed=0))


def run_one(script: Path, env: dict[str, str], cwd: Path, timeout: int) -> dict[str, object]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            ["bash", str(script), *overrides_for(script)],
            env=python_shim(script, env, cwd),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimeout after {timeout} s", 124
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("+")]
    error = next(
        (ln for ln in reversed(lines) if "error" in ln.lower() or "not supported" in ln), lines[-1] if lines else ""
    )
    stepped = any(s in out for s in ("step:1 ", "training/global_step:1", "step 1"))
    return {
        "result": "pass" if rc == 0 and stepped else "fail",
        "rc": rc,
        "seconds": round(time.perf_counter() - start, 1),
        "last_error": "" if rc == 0 else error[-400:],
    }


def write_table(results: dict[str, dict[str, object]], path: Path) -> None:
    """The results as a Markdown table (pasted into ../README.md)."""
    rows = ["| script (verl source) | result | seconds | error |", "|---|---|---|---|"]
    for name, r in sorted(results.items()):
        source = name.replace("__", "/").removeprefix("e2e_")
        source = ("tests/special_e2e/" if name.startswith("e2e_") else "examples/") + source
        if name.startswith("experimental_"):
            folder, script = name.removeprefix("experimental_").split("__", 1)
            source = f"verl/experimental/{folder}/shell/{script}"
        rows.append(f"| `{source}` | {r['result']} | {r['seconds']} | {str(r['last_error']).replace('|', '/')} |")
    path.write_text("\n".join(rows) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", default=str(HERE / "results.json"))
    parser.add_argument("--timeout", type=int, default=900)
    args = parser.parse_args()
    scripts = sorted(HERE.glob("*.sh"))
    if args.only:
        scripts = [s for s in scripts if any(o in s.name for o in args.only)]
    work = Path(tempfile.mkdtemp(prefix="verl_scripts_"))
    home, model = make_home(work), make_model(work)
    env = dict(os.environ)
    env.update(SIZES)
    env.update(
        {
            "HOME": str(home),
            "MODEL_PATH": str(model),
            "REWARD_MODEL_PATH": str(model),
            "TRAIN_FILE": str(home / "data" / "gsm8k" / "train.parquet"),
            "TEST_FILE": str(home / "data" / "gsm8k" / "test.parquet"),
            "VAL_FILE": str(home / "data" / "math" / "test.parquet"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "RAY_AUTH_MODE": "disabled",
        }
    )
    results = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    for script in scripts:
        cwd = work / script.stem
        cwd.mkdir()
        results[script.name] = run_one(script, env, cwd, args.timeout)
        print(
            f"{script.name}: {results[script.name]['result']} ({results[script.name]['seconds']} s) "
            f"{results[script.name]['last_error']}",
            flush=True,
        )
        Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_table(results, Path(args.out).with_suffix(".md"))
    passed = sum(r["result"] == "pass" for r in results.values())
    print(f"{passed}/{len(results)} scripts trained one step")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
