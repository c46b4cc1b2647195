"""verl's checkpoint layout and merge CLI (issue 11, deliver 4).

Every role directory of a checkpoint holds ``huggingface/`` (HF config + tokenizer files);
``verl merge`` and ``python -m verl.model_merger merge --backend fsdp`` accept
``global_step_N`` or ``global_step_N/actor``, and the merged directory loads with plain
``from_pretrained`` giving the trained actor's logits (float32, within 1e-6).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from run_helpers import tiny_run_overrides
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.config import load_config
from verl.model_merger import main as merger_main
from verl.trainer import RLTrainer
from verl.commands.merge import main as merge_main

TEXTS = ("12+34", "99+1", "7+58")


@torch.no_grad()
def _logits(model: torch.nn.Module, tokenizer) -> list[torch.Tensor]:
    """Float32 logits `(1, T, V)` of each text in `TEXTS`."""
    model.eval()
    return [
        model(input_ids=torch.tensor([tokenizer(t, add_special_tokens=False)["input_ids"]])).logits.float()
        for t in TEXTS
    ]


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory):
    """One GAE step (actor + critic) saved as ``global_step_1``; returns (trainer, checkpoint)."""
    run_dir = tmp_path_factory.mktemp("model_merger")
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            run_dir,
            **{
                "algorithm.adv_estimator": "gae",
                "actor_rollout_ref.rollout.n": 1,
                "critic.optim.lr": 1e-3,
                "trainer.total_training_steps": 1,
                "trainer.save_freq": 1,
            },
        ),
    )
    trainer = RLTrainer(config=cfg)
    trainer.fit()
    return trainer, run_dir / "ckpt" / "global_step_1"


@pytest.mark.e2e
def test_each_role_has_a_huggingface_dir(run, tiny_model_dir):
    _, ckpt = run
    source = json.loads((tiny_model_dir / "config.json").read_text())
    for role in ("actor", "critic"):
        hf = ckpt / role / "huggingface"
        assert json.loads((hf / "config.json").read_text())["model_type"] == source["model_type"]
        assert (hf / "tokenizer_config.json").is_file() and (hf / "tokenizer.json").is_file()
        assert (hf / "generation_config.json").is_file() == (tiny_model_dir / "generation_config.json").is_file()
    files = json.loads((ckpt / "manifest.json").read_text())["files"]
    assert "actor/huggingface/config.json" in files and "critic/huggingface/tokenizer.json" in files


@pytest.mark.e2e
@pytest.mark.parametrize("entry", ["verl_merge", "model_merger"])
@pytest.mark.parametrize("form", ["global_step", "actor"])
def test_merged_model_equals_trained_actor(run, tiny_model_dir, tmp_path, entry, form):
    trainer, ckpt = run
    src = ckpt if form == "global_step" else ckpt / "actor"
    target = tmp_path / "hf"
    if entry == "verl_merge":
        assert merge_main([str(src), str(target)]) == 0
    else:
        assert merger_main(["merge", "--backend", "fsdp", "--local_dir", str(src), "--target_dir", str(target)]) == 0
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    actor = trainer.parts.actor_rollout_wg.workers[0].actor_engine.module
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    hf_tok = AutoTokenizer.from_pretrained(str(target))
    assert hf_tok("12+34")["input_ids"] == tok("12+34")["input_ids"]
    assert _max_diff(_logits(model, hf_tok), _logits(actor, tok)) <= 1e-6
    initial = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    assert _max_diff(_logits(initial, tok), _logits(actor, tok)) > 1e-5  # the step moved the weights


@pytest.mark.e2e
def test_python_m_model_merger_and_hf_model_path(run, tiny_model_dir, tmp_path):
    _, ckpt = run
    cmd = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(ckpt / "actor"),
        "--target_dir",
        str(tmp_path / "cli"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        merger_main(
            [
                "merge",
                "--backend",
                "fsdp",
                "--local_dir",
                str(ckpt / "actor"),
                "--target_dir",
                str(tmp_path / "hfp"),
                "--hf_model_path",
                str(tiny_model_dir),
            ]
        )
        == 0
    )
    a, b = (
        load_file(str(tmp_path / "cli" / "model.safetensors")),
        load_file(str(tmp_path / "hfp" / "model.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.e2e
def test_checkpoint_in_the_older_layout_still_merges(run, tmp_path):
    _, ckpt = run
    old = tmp_path / "global_step_1"
    shutil.copytree(ckpt, old)
    hf = old / "actor" / "huggingface"
    shutil.copy(hf / "config.json", old / "actor" / "config.json")
    AutoTokenizer.from_pretrained(str(hf)).save_pretrained(str(old / "actor" / "tokenizer"))
    shutil.rmtree(hf)
    (old / "manifest.json").unlink()  # the doctored copy no longer matches it
    assert merge_main([str(old / "actor"), str(tmp_path / "new"), "--no-verify"]) == 0
    assert merge_main([str(ckpt), str(tmp_path / "ref")]) == 0
    a, b = (
        load_file(str(tmp_path / "new" / "model.safetensors")),
        load_file(str(tmp_path / "ref" / "model.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_model_merger_refuses_what_it_cannot_do(tmp_path, capsys):
    base = ["merge", "--local_dir", str(tmp_path), "--target_dir", str(tmp_path / "out")]
    for extra, expected in (
        (["--backend", "megatron"], "--backend megatron is not supported yet"),
        (["--backend", "fsdp", "--is-value-model"], "--is-value-model is not supported yet"),
        (["--backend", "fsdp", "--hf_upload_path", "me/model"], "--hf_upload_path is not supported yet"),
        (["--backend", "fsdp"], "config.yaml not found"),
    ):
        assert merger_main(base + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "out").exists()
