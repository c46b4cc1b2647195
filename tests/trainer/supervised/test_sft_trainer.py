"""SFT trainer: loss falls on GSM8K, 1 vs 2 workers agree, a killed run resumes exactly, SFT -> RL.

The subprocess tests run with one intra-op thread so that results are bit-reproducible and the
shared CPU is not oversubscribed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from verl.config.sft_loader import load_sft_config
from verl.trainer.supervised.builders import build_supervised_trainer

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))
BUILTIN = [
    "model.partial_pretrain=builtin://tiny-arithmetic",
    "data.train_files=builtin://arithmetic_sft/train",
    "data.prompt_key=prompt",
    "data.response_key=response",
    "data.max_length=32",
    "optim.lr=1e-3",
    "optim.lr_scheduler=cosine",
    "optim.warmup_steps_ratio=0.2",
]


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def dirs(tmp: Path, name: str) -> list[str]:
    return [
        f"trainer.default_local_dir={tmp}/{name}/ckpt",
        f"trainer.output_dir={tmp}/{name}/out",
        "trainer.logger=[console,jsonl]",
    ]


def losses(tmp: Path, name: str, key: str = "train/loss") -> dict[int, float]:
    rows = [json.loads(x) for x in (tmp / name / "out" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r[key] for r in rows if key in r}


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    from verl.modules.init_model import init_random_model

    tok = SHARED / "tokenizers" / "qwen2.5"
    if not tok.is_dir():
        pytest.skip("qwen2.5 tokenizer not available")
    return init_random_model("qwen2", "tiny", tok, tmp_path_factory.mktemp("qwen") / "model", seed=0)


def test_sft_gsm8k_loss_falls_over_50_steps(tmp_path: Path, tiny_qwen: Path) -> None:
    """Random tiny Qwen2 on GSM8K question -> worked solution, 50 steps of 4 sequences (<= 32 tokens)."""
    data = SHARED / "data" / "gsm8k" / "train.jsonl"
    if not data.is_file():
        pytest.skip("gsm8k data not available")
    torch.set_num_threads(1)
    cfg = load_sft_config(
        None,
        [
            f"model.partial_pretrain={tiny_qwen}",
            f"data.train_files={data}",
            "data.max_length=32",
            "data.truncation=left",
            "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=4",
            "trainer.total_training_steps=50",
            "optim.lr=3e-3",
            "optim.warmup_steps_ratio=0.1",
            *dirs(tmp_path, "gsm8k"),
        ],
    )
    history = build_supervised_trainer(cfg).fit()
    loss = [h["train/loss"] for h in history]
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"gsm8k SFT loss: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
    assert len(loss) == 50 and first > 11.0  # random init: about ln(151k) = 11.9 nats
    assert last < first - 3.0
    out = tmp_path / "gsm8k" / "ckpt" / "global_step_50"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert AutoModelForCausalLM.from_pretrained(out) is not None
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"


@pytest.mark.parametrize(
    "schedule, expected",
    [
        # warm-up 2 of 6 updates, then 0.5 * (1 + cos(pi * progress)), progress = (k - 2) / 4
        ("cosine", [0.5, 1.0, 0.8535534, 0.5, 0.1464466, 0.0]),
        ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_sft_lr_schedule_takes_effect(tmp_path: Path, schedule: str, expected: list[float]) -> None:
    """``optim.lr_scheduler`` drives the lr of every update (it was once dropped: constant lr always)."""
    torch.set_num_threads(1)
    cfg = load_sft_config(
        None,
        [
            *BUILTIN[:5],
            "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=4",
            "trainer.total_training_steps=6",
            "optim.lr=1e-3",
            "optim.lr_warmup_steps=2",
            f"optim.lr_scheduler={schedule}",
            *dirs(tmp_path, schedule),
        ],
    )
    history = build_supervised_trainer(cfg).fit()
    assert [h["train/lr"] for h in history] == pytest.approx([1e-3 * m for m in expected], abs=1e-9)


def _run(args: list[str], nproc: int = 1, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "verl.trainer.fsdp_sft_trainer",
            *args,
        ]
        if nproc > 1
        else [sys.executable, "-m", "verl.trainer.fsdp_sft_trainer", *args]
    )
    if not wait:
        return subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_sft_one_vs_two_workers_equal_losses(tmp_path: Path) -> None:
    """1 process vs 2 FSDP2 ranks, and 2 ranks with packed forwards (``use_remove_padding=true``:
    the sharded model takes the unfused packed path): the same losses."""
    common = [
        *BUILTIN,
        "data.val_files=builtin://arithmetic_answers/test",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        "trainer.total_training_steps=4",
    ]
    for name, nproc, packed in (("one", 1, "false"), ("two", 2, "false"), ("two_packed", 2, "true")):
        r = _run([*common, *dirs(tmp_path, name), f"use_remove_padding={packed}"], nproc)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    one = losses(tmp_path, "one")
    assert sorted(one) == [1, 2, 3, 4]
    for other in ("two", "two_packed"):
        got = losses(tmp_path, other)
        for step in one:
            assert got[step] == pytest.approx(one[step], abs=1e-5), (other, step)
        assert losses(tmp_path, other, "val/loss")[4] == pytest.approx(losses(tmp_path, "one", "val/loss")[4], abs=1e-5)
    assert one[4] != one[1]  # the weights did change


@pytest.mark.e2e
def test_killed_sft_run_resumes_exactly(tmp_path: Path) -> None:
    common = [
        *BUILTIN,
        "data.train_batch_size=16",
        "data.micro_batch_size_per_gpu=8",
        "trainer.total_training_steps=40",
    ]
    full = _run([*common, *dirs(tmp_path, "full")])
    assert full.returncode == 0, full.stderr[-3000:]
    proc = _run([*common, *dirs(tmp_path, "killed"), "trainer.save_freq=5"], wait=False)
    latest = tmp_path / "killed" / "ckpt" / "latest_checkpointed_iteration.txt"
    deadline = time.time() + 300
    while not latest.is_file() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = int(latest.read_text())
    assert killed_at < 40, "the run finished before it could be killed"
    resumed = _run([*common, *dirs(tmp_path, "killed"), "trainer.save_freq=5"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"step {killed_at}" in resumed.stdout
    ref, got = losses(tmp_path, "full"), losses(tmp_path, "killed")
    assert sorted(got) == list(range(1, 41))
    for step in range(1, 41):
        assert got[step] == pytest.approx(ref[step], abs=1e-6), step


@pytest.mark.e2e
def test_sft_output_is_the_actor_of_verl_train(tmp_path: Path) -> None:
    r = _run(
        [
            *BUILTIN,
            "data.train_batch_size=16",
            "data.micro_batch_size_per_gpu=16",
            "trainer.total_training_steps=2",
            *dirs(tmp_path, "sft"),
        ]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    actor = tmp_path / "sft" / "ckpt" / "global_step_2"
    rl = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.cli",
            "train",
            f"actor_rollout_ref.model.path={actor}",
            "trainer.total_training_steps=2",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=2",
            f"trainer.default_local_dir={tmp_path}/rl/ckpt",
            f"trainer.output_dir={tmp_path}/rl/out",
            "trainer.plot=false",
            "trainer.val_before_train=false",
            "trainer.logger=[jsonl]",
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rl.returncode == 0, rl.stdout[-3000:] + rl.stderr[-3000:]
    steps = [json.loads(x)["step"] for x in (tmp_path / "rl" / "out" / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 2
