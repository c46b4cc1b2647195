"""``verl merge`` never runs code named by a checkpoint (issue 12.6).

A checkpoint is doctored the way an attacker (or a careless copy) would: its ``config.yaml``
asks for ``trust_remote_code`` from a directory holding modelling code, its
``actor/huggingface/config.json`` has an ``auto_map`` to code saved beside it, and its manifest
is rewritten to match. That code writes a marker file when imported; after the merge the
marker must not exist.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from run_helpers import tiny_run_overrides
from safetensors.torch import load_file

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.run.checkpoint import CheckpointError
from verl.run.hf_export import export_hf
from verl.utils.errors import CheckpointLoadError

pytestmark = pytest.mark.e2e  # the fixture trains a tiny run

EVIL = """
from pathlib import Path
Path({marker!r}).write_text("remote code ran")
from transformers import LlamaConfig, LlamaForCausalLM
class EvilConfig(LlamaConfig):
    model_type = {model_type!r}
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
"""


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("merge_safety")
    cfg = load_config(None, tiny_run_overrides(tiny_model_dir, run_dir, **{"trainer.save_freq": 2}))
    RLTrainer(config=cfg).fit()
    return run_dir / "ckpt" / "global_step_2"


def _rewrite_manifest(ckpt: Path) -> None:
    files = {
        str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(ckpt.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (ckpt / "manifest.json").write_text(json.dumps({"step": 2, "files": files}))


def _doctor(checkpoint: Path, tmp_path: Path, model_type: str = "llama") -> tuple[Path, Path]:
    ckpt, marker = tmp_path / "global_step_2", tmp_path / "REMOTE_CODE_RAN"
    shutil.copytree(checkpoint, ckpt)
    evil_dir = tmp_path / "evil_model"
    shutil.copytree(checkpoint / "actor" / "huggingface", evil_dir)
    code = EVIL.format(marker=str(marker), model_type=model_type)
    auto_map = {"AutoConfig": "evil_code.EvilConfig", "AutoModelForCausalLM": "evil_code.EvilModel"}
    for d in (evil_dir, ckpt / "actor" / "huggingface"):
        (d / "evil_code.py").write_text(code)
        hf = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**hf, "model_type": model_type, "auto_map": auto_map}))
    run_cfg = yaml.safe_load((ckpt / "config.yaml").read_text())
    run_cfg["actor_rollout_ref"]["model"].update(path=str(evil_dir), trust_remote_code=True)
    (ckpt / "config.yaml").write_text(yaml.safe_dump(run_cfg))
    _rewrite_manifest(ckpt)
    return ckpt, marker


def test_merge_ignores_remote_code_named_by_the_checkpoint(checkpoint, tmp_path):
    ckpt, marker = _doctor(checkpoint, tmp_path)
    script = Path(sys.executable).parent / "verl"
    proc = subprocess.run(
        [str(script), "merge", str(ckpt), str(tmp_path / "hf")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not marker.exists(), "verl merge ran code from the checkpoint"
    out = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert out["model_type"] == "llama" and "auto_map" not in out
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    trained = load_file(str(checkpoint / "actor" / "model.safetensors"))
    assert all(torch.equal(exported[k], trained[k]) for k in exported)


def test_unknown_model_type_needs_trust_remote_code_on_the_command_line(checkpoint, tmp_path):
    ckpt, marker = _doctor(checkpoint, tmp_path, model_type="evil_llama")
    with pytest.raises(
        CheckpointLoadError, match="'evil_llama' is not a transformers architecture.*--trust-remote-code"
    ):
        export_hf(ckpt, tmp_path / "hf")
    assert not marker.exists()


def test_checkpoint_without_manifest_needs_no_verify(checkpoint, tmp_path, capsys):
    from verl.commands.merge import main

    ckpt = tmp_path / "global_step_2"
    shutil.copytree(checkpoint, ckpt)
    (ckpt / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="no manifest.json.*--no-verify"):
        export_hf(ckpt, tmp_path / "refused")
    assert main([str(ckpt), str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-verify" in err
    assert main([str(ckpt), str(tmp_path / "hf"), "--no-verify"]) == 0
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_non_weights_file_is_one_line_error(checkpoint, tmp_path, capsys):
    from verl.commands.merge import main

    ckpt = tmp_path / "global_step_2"
    shutil.copytree(checkpoint, ckpt)
    (ckpt / "actor" / "model.safetensors").write_bytes(b"not weights")
    _rewrite_manifest(ckpt)
    assert main([str(ckpt), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.safetensors is not a loadable safetensors file" in err
