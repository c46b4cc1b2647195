"""Hybrid training: one step's gradient is Σ w_i ∇L_i of the single-task gradients; the 3-stream run completes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl.config.sft_loader import load_sft_config
from verl.config.errors import ConfigError
from verl.trainer.supervised.builders import build_supervised_trainer, normalised_weights

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sft" / "hybrid_builtin.yaml"


def _cfg(tmp_path: Path, *extra: str):
    return load_sft_config(
        EXAMPLE,
        [
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"trainer.output_dir={tmp_path}/out",
            "trainer.logger=[jsonl]",
            *extra,
        ],
    )


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def test_hybrid_gradient_is_weighted_sum_of_task_gradients(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    # un-normalised weights: [2, 2, 1] must act as [0.4, 0.4, 0.2]
    trainer = build_supervised_trainer(_cfg(tmp_path, "trainer.task_weights=[2,2,1]"))
    assert trainer.weights == pytest.approx([0.4, 0.4, 0.2])
    assert [s.kind for s in trainer.streams] == ["sft", "dpo", "rl"]
    batches = [s.prepare(s.batch(1, 0, 1), 1)[0] for s in trainer.streams]
    module = trainer.engine.module
    module.zero_grad(set_to_none=True)
    hybrid_metrics = {}
    for s, w, b in zip(trainer.streams, trainer.weights, batches):
        hybrid_metrics[s.name] = trainer._accumulate(s, w, b)
    g_hybrid = _grads(module)
    singles, losses = [], []
    for s, b in zip(trainer.streams, batches):
        module.zero_grad(set_to_none=True)
        losses.append(trainer._accumulate(s, 1.0, b)["loss"])
        singles.append(_grads(module))
    assert g_hybrid.keys() == singles[0].keys()
    nonzero = 0
    for name, g in g_hybrid.items():
        expected = sum(w * single[name] for w, single in zip(trainer.weights, singles))
        torch.testing.assert_close(g, expected, atol=1e-6, rtol=1e-5)
        nonzero += int(g.abs().sum() > 0)
    assert nonzero > 0
    # every task contributes a non-zero gradient (the check above could not pass on one stream alone)
    assert all(sum(float(g.abs().sum()) for g in single.values()) > 0 for single in singles)
    # the logged per-task losses are the single-task losses
    for s, loss in zip(trainer.streams, losses):
        assert hybrid_metrics[s.name]["loss"] == pytest.approx(loss, abs=1e-6)


@pytest.mark.e2e
def test_hybrid_three_streams_run_completes(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = _cfg(tmp_path, "trainer.total_training_steps=2")
    history = build_supervised_trainer(cfg).fit()
    assert [h["step"] for h in history] == [1, 2]
    for h in history:
        for task in ("sft", "dpo", "rl"):
            assert torch.isfinite(torch.tensor(h[f"hybrid/{task}/loss"]))
        combined = 0.4 * h["hybrid/sft/loss"] + 0.4 * h["hybrid/dpo/loss"] + 0.2 * h["hybrid/rl/loss"]
        assert h["train/loss"] == pytest.approx(combined)
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and "hybrid/rl/score_mean" in rows[-1]
    assert (tmp_path / "ckpt" / "global_step_2" / "config.json").is_file()


def test_hybrid_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="3 hybrid.tasks"):
        _cfg(tmp_path, "trainer.task_weights=[0.5,0.5]")
    with pytest.raises(ConfigError, match="rollout_n"):
        _cfg(tmp_path, "hybrid.tasks.2.rollout_n=1") if False else load_sft_config(
            None, ["trainer.algorithm=hybrid", "hybrid.tasks=[{name: r, loss: rl, train_files: [x], rollout_n: 1}]"]
        )
    assert normalised_weights([], 3) == pytest.approx([1 / 3] * 3)


@pytest.mark.e2e
def test_hybrid_resume_is_exact(tmp_path: Path) -> None:
    """Steps 3-4 after resuming from step 2's checkpoint equal the uninterrupted run's (RL sampling included)."""
    import shutil

    torch.set_num_threads(1)
    full = build_supervised_trainer(_cfg(tmp_path / "a", "trainer.total_training_steps=4", "trainer.save_freq=2")).fit()
    shutil.copytree(tmp_path / "a" / "ckpt", tmp_path / "b" / "ckpt")
    shutil.rmtree(tmp_path / "b" / "ckpt" / "global_step_4")
    (tmp_path / "b" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = build_supervised_trainer(
        _cfg(tmp_path / "b", "trainer.total_training_steps=4", "trainer.save_freq=2")
    ).fit()
    assert [h["step"] for h in resumed] == [3, 4]
    for got, ref in zip(resumed, full[2:]):
        for key in ("hybrid/sft/loss", "hybrid/dpo/loss", "hybrid/rl/loss", "hybrid/rl/score_mean", "train/grad_norm"):
            assert got[key] == pytest.approx(ref[key], abs=1e-6), key


@pytest.mark.slow  # two ranks for a whole hybrid run; the hybrid resume test keeps the hybrid loop in the default suite
@pytest.mark.e2e
def test_hybrid_one_vs_two_ranks_equal(tmp_path: Path) -> None:
    """RL samples are seeded per global trajectory, so 1 and 2 gloo ranks give the same step metrics."""
    import os
    import subprocess
    import sys

    repo = EXAMPLE.parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    for name, nproc in (("one", 1), ("two", 2)):
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
        r = subprocess.run(
            [
                sys.executable,
                *launcher,
                "-m",
                "verl.trainer.fsdp_sft_trainer",
                str(EXAMPLE),
                "trainer.total_training_steps=2",
                "trainer.logger=[jsonl]",
                f"trainer.default_local_dir={tmp_path}/{name}/ckpt",
                f"trainer.output_dir={tmp_path}/{name}/out",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = {
        n: [json.loads(x) for x in (tmp_path / n / "out" / "metrics.jsonl").read_text().splitlines()]
        for n in ("one", "two")
    }
    for a, b in zip(rows["one"], rows["two"], strict=True):
        for key in (
            "train/loss",
            "train/grad_norm",
            "hybrid/sft/loss",
            "hybrid/dpo/loss",
            "hybrid/rl/loss",
            "hybrid/rl/score_mean",
        ):
            assert b[key] == pytest.approx(a[key], abs=1e-5), key


def test_hybrid_refuses_single_stream_data_keys(tmp_path: Path) -> None:
    for key in ("data.train_files=[x.jsonl]", "data.val_files=[x.jsonl]", "data.train_batch_size=4"):
        with pytest.raises(ConfigError, match="is not used with trainer.algorithm=hybrid"):
            _cfg(tmp_path, key)
