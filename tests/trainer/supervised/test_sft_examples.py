"""examples/sft: every YAML validates; verl's run_qwen_05_peft.sh runs (paths, sizes, nproc changed only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl.config.sft_loader import load_sft_config

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "sft").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_validate(path: Path) -> None:
    cfg = load_sft_config(path)
    assert cfg.trainer.algorithm in ("sft", "dpo", "hybrid")


@pytest.mark.e2e
def test_run_qwen_05_peft_script_two_ranks(tmp_path: Path) -> None:
    from verl.data.prepare import main as prepare
    from verl.modules.init_model import init_random_model

    raw = SHARED / "data" / "gsm8k" / "train.jsonl"
    if not raw.is_file():
        pytest.skip("gsm8k data not available")
    lines = raw.read_text().splitlines()
    data = tmp_path / "data"
    for split, rows in (("train", lines[:32]), ("test", lines[32:40])):
        src = tmp_path / f"{split}.jsonl"
        src.write_text("\n".join(rows) + "\n")
        assert prepare(["gsm8k", "--input", str(src), "--out", str(data), "--split", split]) == 0
    model = init_random_model("qwen2", "tiny", SHARED / "tokenizers" / "qwen2.5", tmp_path / "model")
    save = tmp_path / "ckpt"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "MODEL_PATH": str(model),
        "DATA_DIR": str(data),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    sizes = [
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=1",
        "data.max_length=64",
        "data.truncation=left",
        "trainer.total_training_steps=2",
        "trainer.logger=[console,jsonl]",
        f"trainer.output_dir={tmp_path}/out",
    ]
    r = subprocess.run(
        ["bash", str(REPO / "examples" / "sft" / "gsm8k" / "run_qwen_05_peft.sh"), "2", str(save), *sizes],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [1, 2] and "val/loss" in rows[-1]
    out = save / "global_step_2"
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()  # LoRA merged
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_cli_config_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from verl.cli import main

    assert main(["sft", "data.promt_key=question"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "verl sft: config error: unknown key 'data.promt_key' (did you mean 'data.prompt_key'?)"
    assert main(["dpo", "dpo.loss_type=kto"]) == 2
    assert "dpo.loss_type: must be one of ipo, sigmoid, got 'kto'" in capsys.readouterr().err
    assert main(["sft", "trainer.default_hdfs_dir=hdfs://x"]) == 2
    assert "is not supported yet" in capsys.readouterr().err
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "sft " in out and "dpo " in out
