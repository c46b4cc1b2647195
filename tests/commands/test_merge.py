"""``verl merge`` and ``trainer.save_hf``: a trained checkpoint → a Hugging Face directory.

The reference is the trainer's own in-process actor after 2 GRPO steps: the exported model,
loaded offline with plain transformers (or peft for ``--adapter-only``), must give its logits
within 1e-6 (float32). LoRA runs also check that the adapters train, and that the reference
policy (``use_kl_loss``) is the actor with adapters disabled, i.e. the untouched base model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_helpers import tiny_run_overrides
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.run.checkpoint import CheckpointError
from verl.run.hf_export import export_hf
from verl.commands.merge import main

pytestmark = pytest.mark.e2e  # whole training loops (and subprocesses)

TEXTS = ("12+34", "99+1", "7+58")
LORA = {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 8}


def _train(model_dir: Path, run_dir: Path, **extra: object) -> RLTrainer:
    cfg = load_config(None, tiny_run_overrides(model_dir, run_dir, **{"trainer.save_freq": 2, **extra}))
    trainer = RLTrainer(config=cfg)
    trainer.fit()
    return trainer


def _actor(trainer: RLTrainer) -> torch.nn.Module:
    return trainer.parts.actor_rollout_wg.workers[0].actor_engine.module


@torch.no_grad()
def _logits(model: torch.nn.Module, tokenizer) -> list[torch.Tensor]:
    """Float32 logits `(1, T, V)` of each text in `TEXTS` (one unpadded sequence at a time)."""
    model.eval()
    out = []
    for text in TEXTS:
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        out.append(model(input_ids=ids).logits.float())
    return out


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _load_hf(path: Path) -> tuple[torch.nn.Module, object]:
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32), AutoTokenizer.from_pretrained(
        str(path)
    )


@pytest.fixture(scope="module")
def plain(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("plain")
    trainer = _train(tiny_model_dir, run_dir, **{"trainer.save_hf": True})
    return trainer, run_dir / "ckpt" / "global_step_2"


@pytest.fixture(scope="module")
def lora(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lora")
    trainer = _train(tiny_model_dir, run_dir, **LORA, **{"actor_rollout_ref.model.target_modules": "all-linear"})
    return trainer, run_dir / "ckpt" / "global_step_2"


def test_merge_plain_equals_trained_actor(plain, tiny_model_dir, tmp_path):
    trainer, ckpt = plain
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    reference = _logits(_actor(trainer), tok)
    assert main([str(ckpt), str(tmp_path / "hf")]) == 0
    model, hf_tok = _load_hf(tmp_path / "hf")
    assert hf_tok("12+34")["input_ids"] == tok("12+34")["input_ids"]
    assert _max_diff(_logits(model, hf_tok), reference) <= 1e-6
    # the test can fail: 2 steps at lr 1e-3 moved the logits away from the initial model's
    initial, _ = _load_hf(tiny_model_dir)
    assert _max_diff(_logits(initial, tok), reference) > 1e-4


@pytest.mark.slow  # a console-script subprocess; the in-process merge tests check the same files
def test_merge_console_script_same_files(plain, tmp_path):
    _, ckpt = plain
    assert main([str(ckpt), str(tmp_path / "api")]) == 0
    script = Path(sys.executable).parent / "verl"
    proc = subprocess.run(
        [str(script), "merge", str(ckpt), str(tmp_path / "cli")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = (
        load_file(str(tmp_path / "api" / "model.safetensors")),
        load_file(str(tmp_path / "cli" / "model.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_save_hf_dir_loads_and_is_in_manifest(plain):
    trainer, ckpt = plain
    hf = ckpt / "huggingface"
    files = json.loads((ckpt / "manifest.json").read_text())["files"]
    exported = {str(p.relative_to(ckpt)) for p in hf.rglob("*") if p.is_file()}
    assert "huggingface/model.safetensors" in exported and "huggingface/config.json" in exported
    assert exported <= set(files)
    model, tok = _load_hf(hf)
    assert _max_diff(_logits(model, tok), _logits(_actor(trainer), tok)) <= 1e-6


def test_merge_refuses_truncated_checkpoint_and_bad_requests(plain, tmp_path, capsys):
    _, ckpt = plain
    assert main([str(ckpt), str(tmp_path / "x"), "--adapter-only"]) == 2
    assert "--adapter-only needs a LoRA run" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "adapter_config.json").write_text("{}")
    assert main([str(ckpt), str(tmp_path / "full")]) == 2
    assert "is not empty" in capsys.readouterr().err
    damaged = tmp_path / "global_step_2"
    subprocess.run(["cp", "-r", str(ckpt), str(damaged)], check=True)
    weights = damaged / "actor" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        export_hf(damaged, tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_lora_trains_and_merged_export_is_a_plain_model(lora, tiny_model_dir, tmp_path):
    trainer, ckpt = lora
    actor = _actor(trainer)
    lora_b = {k: v for k, v in actor.state_dict().items() if "lora_B" in k}
    assert lora_b and any(v.abs().max() > 0 for v in lora_b.values()), "LoRA B (zero-initialised) did not train"
    initial = load_file(str(tiny_model_dir / "model.safetensors"))
    saved = load_file(str(ckpt / "actor" / "model.safetensors"))
    base = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v for k, v in saved.items() if "lora_" not in k
    }
    assert all(torch.equal(base[k], initial[k]) for k in initial), "frozen base weights changed"
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    reference = _logits(actor, tok)
    assert main([str(ckpt), str(tmp_path / "merged")]) == 0
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    assert not any("lora" in k for k in load_file(str(tmp_path / "merged" / "model.safetensors")))
    model, hf_tok = _load_hf(tmp_path / "merged")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert _max_diff(_logits(model, hf_tok), reference) <= 1e-6
    base_model, _ = _load_hf(tiny_model_dir)
    assert _max_diff(_logits(base_model, tok), reference) > 1e-5


def test_lora_adapter_only_loads_with_peft(lora, tiny_model_dir, tmp_path):
    from peft import PeftModel

    trainer, ckpt = lora
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert main([str(ckpt), str(tmp_path / "adapter"), "--adapter-only"]) == 0
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 4
    base, _ = _load_hf(tiny_model_dir)
    model = PeftModel.from_pretrained(base, str(tmp_path / "adapter"))
    assert _max_diff(_logits(model, tok), _logits(_actor(trainer), tok)) <= 1e-6


def test_lora_kl_loss_reference_is_the_base_model(tiny_model_dir, tmp_path):
    from verl.modules import ref_policy_context

    trainer = _train(
        tiny_model_dir,
        tmp_path,
        **LORA,
        **{
            "actor_rollout_ref.model.target_modules": "[q_proj,v_proj]",
            "actor_rollout_ref.actor.use_kl_loss": True,
            "actor_rollout_ref.actor.kl_loss_coef": 0.1,
            "trainer.save_hf": True,
        },
    )
    worker = trainer.parts.actor_rollout_wg.workers[0]
    assert worker.ref_engine is None, "LoRA must not keep a second copy of the weights as reference"
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    kl = {int(r["step"]): r["actor/kl_loss"] for r in rows}
    # step 1: adapters still zero, actor == reference, KL exactly 0; step 2: adapters trained
    assert abs(kl[1]) < 1e-9 and kl[2] > 0
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    base, _ = _load_hf(tiny_model_dir)
    with ref_policy_context(worker.actor_engine.module) as ref:
        assert _max_diff(_logits(ref, tok), _logits(base, tok)) == 0.0
    hf, hf_tok = _load_hf(tmp_path / "ckpt" / "global_step_2" / "huggingface")
    assert _max_diff(_logits(hf, hf_tok), _logits(worker.actor_engine.module, tok)) <= 1e-6
