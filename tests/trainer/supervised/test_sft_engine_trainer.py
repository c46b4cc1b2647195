"""verl's engine-layout SFT trainer (``torchrun -m verl.trainer.sft_trainer`` with sft_trainer_engine.yaml keys).

Multi-turn rows with tool calls (messages + tools columns) on a tiny random Qwen2 with the
Qwen2.5 tokenizer (which renders the tool schemas). In-process runs check that the engine keys
act; subprocess runs (e2e) check 1 vs 2 gloo ranks, the Ray launcher and verl's example script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer.supervised.sft_engine_helpers import write_multiturn_parquet
from verl.config.sft_loader import load_sft_config
from verl.trainer.supervised.builders import build_supervised_trainer

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("VERL_SHARED_DIR", "/work/shared"))


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    from verl.modules.init_model import init_random_model

    tok = SHARED / "tokenizers" / "qwen2.5"
    if not tok.is_dir():
        pytest.skip("qwen2.5 tokenizer not available")
    return init_random_model("qwen2", "tiny", tok, tmp_path_factory.mktemp("qwen") / "model", seed=0)


@pytest.fixture(scope="module")
def mt_data(tmp_path_factory) -> dict[str, str]:
    return write_multiturn_parquet(tmp_path_factory.mktemp("multiturn"))


def keys(model: Path, data: dict[str, str], tmp: Path, name: str, *extra: str) -> list[str]:
    return [
        f"model.path={model}",
        f"data.train_files={data['train']}",
        f"data.val_files={data['test']}",
        "data.messages_key=messages",
        "data.tools_key=tools",
        "data.max_length=512",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=2",
        "engine=fsdp",
        "optim=fsdp",
        "model=hf_model",
        "optim.lr=1e-3",
        "model.enable_gradient_checkpointing=false",
        "trainer.total_training_steps=2",
        "trainer.device=cpu",
        f"trainer.default_local_dir={tmp}/{name}/ckpt",
        f"+trainer.output_dir={tmp}/{name}/out",
        "trainer.logger=[console,jsonl]",
        *extra,
    ]


def fit(args: list[str]) -> list[dict[str, float]]:
    torch.set_num_threads(1)
    return build_supervised_trainer(load_sft_config(None, args)).fit()


@pytest.mark.e2e  # two 2-step runs of a 151k-vocabulary model: ~20 s on a shared CPU
def test_engine_keys_act(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    """use_dynamic_bsz / pad_mode never change the loss; zero_indexed_step's first warm-up update runs
    at lr 0; save_contents decides what global_step_N holds."""
    fixed = fit(
        keys(
            tiny_qwen,
            mt_data,
            tmp_path,
            "fixed",
            "data.use_dynamic_bsz=false",
            "data.pad_mode=right",
            "model.use_remove_padding=false",
            "optim.lr_warmup_steps=2",
            "checkpoint.save_contents=[model]",
        )
    )
    dyn = fit(
        keys(
            tiny_qwen,
            mt_data,
            tmp_path,
            "dyn",
            "data.max_token_len_per_gpu=300",
            "optim.lr_warmup_steps=2",
            "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            "data.val_files=null",
        )
    )
    for a, b in zip(fixed, dyn):
        assert a["train/loss"] == pytest.approx(b["train/loss"], abs=1e-4)
    assert [h["train/lr"] for h in fixed] == pytest.approx([0.0, 5e-4])  # verl: s / warmup, s = 0, 1
    assert fixed[0]["train/loss"] > 5.0 and "val/loss" in fixed[-1]
    step = tmp_path / "fixed" / "ckpt" / "global_step_2"
    assert sorted(p.name for p in (step / "actor").iterdir()) == ["model.safetensors"]
    assert not (step / "config.json").exists()
    full = tmp_path / "dyn" / "ckpt" / "global_step_2"
    assert {"model.safetensors", "optim.pt", "scheduler.json"} <= {p.name for p in (full / "actor").iterdir()}
    assert (full / "config.json").is_file()


def test_enable_thinking_and_max_samples_reach_the_template(tmp_path: Path, mt_data: dict[str, str]) -> None:
    from verl.data.sft_dataset import SFTDataset
    from verl.data.tokenizer import load_tokenizer

    tok = load_tokenizer(str(SHARED / "tokenizers" / "qwen2.5"))
    template = (
        '{% set p = "T>" if enable_thinking else "N>" %}{% for m in messages %}'
        '{% if m.role == "assistant" %}{{ p }}{{ m.content }}|{% else %}{{ m.role }}:{{ m.content }}|{% endif %}'
        "{% endfor %}{% if add_generation_prompt %}{{ p }}{% endif %}"
    )
    cfg = load_sft_config(
        None,
        [
            f"data.train_files={mt_data['train']}",
            "model.path=x",
            "data.train_max_samples=3",
            "data.enable_thinking_default=true",
            f"model.custom_chat_template='{template}'",
        ],
    )
    tok.chat_template = cfg.data.chat_template
    ds = SFTDataset(cfg.data.train_files, tok, cfg.data, cfg.data.train_max_samples)
    assert len(ds) == 3
    assert "T>" in tok.decode(ds[1]["input_ids"].tolist())
    cfg.data.multiturn.enable_thinking_default = False
    assert "N>" in tok.decode(ds[1]["input_ids"].tolist())


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAY_AUTH_MODE": "disabled",
    }


def _losses(out: Path) -> dict[int, float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


@pytest.mark.e2e
def test_torchrun_one_and_two_ranks_equal_losses(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    """One process (in this one) vs ``torchrun --nproc_per_node=2 -m verl.trainer.sft_trainer`` (gloo, FSDP2)."""
    one = {int(h["step"]): h["train/loss"] for h in fit(keys(tiny_qwen, mt_data, tmp_path, "one"))}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "verl.trainer.sft_trainer",
        *keys(tiny_qwen, mt_data, tmp_path, "two"),
    ]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    two = _losses(tmp_path / "two" / "out")
    assert sorted(one) == [1, 2] and one[2] != one[1]
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5)


@pytest.mark.slow  # two Ray workers: minutes on a shared CPU
@pytest.mark.ray
def test_sft_trainer_ray_equals_torchrun(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    runs = {
        "ray": [sys.executable, "-m", "verl.trainer.sft_trainer_ray", "trainer.nnodes=1", "trainer.n_gpus_per_node=2"],
        "spmd": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "verl.trainer.sft_trainer",
        ],
    }
    for name, cmd in runs.items():
        r = subprocess.run(
            [*cmd, *keys(tiny_qwen, mt_data, tmp_path, name)], env=_env(), capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _losses(tmp_path / "ray" / "out") == pytest.approx(_losses(tmp_path / "spmd" / "out"), abs=1e-6)


@pytest.mark.e2e
def test_verl_multiturn_sft_example_runs_one_step(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    """verl's examples/sft/multiturn/run_qwen2_5_0_5b_fsdp.sh (examples/verl_scripts/sft_multiturn.sh):
    paths, sizes and the logger replaced; nothing else."""
    env = {
        **_env(),
        "PYTHON": sys.executable,
        "MODEL_PATH": str(tiny_qwen),
        "TRAIN_FILES": mt_data["train"],
        "VAL_FILES": mt_data["test"],
        "MICRO_BATCH_SIZE_PER_GPU": "2",
        "TOTAL_TRAINING_STEPS": "1",
        "LOGGER": "['console','jsonl']",
    }
    script = REPO / "examples" / "verl_scripts" / "sft_multiturn.sh"
    r = subprocess.run(
        [
            "bash",
            str(script),
            "1",
            str(tmp_path / "ckpt"),
            "data.train_batch_size=4",
            "data.max_length=512",
            f"+trainer.output_dir={tmp_path}/out",
            "trainer.device=cpu",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(_losses(tmp_path / "out")) == [1]
    assert (tmp_path / "ckpt" / "global_step_1" / "actor" / "model.safetensors").is_file()


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_verl_sft_engine_e2e_script_runs(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    """verl's tests/special_e2e/sft/run_sft_engine.sh (examples/verl_scripts/sft_engine.sh), BACKEND=fsdp, mode=spmd:
    paths, sizes (batch 4, token budget 512) and the logger replaced; its 2 steps run, validation after each epoch."""
    env = {
        **_env(),
        "PYTHON": sys.executable,
        "MODEL_PATH": str(tiny_qwen),
        "TRAIN_FILES": mt_data["train"],
        "VAL_FILES": mt_data["test"],
        "TRAIN_BATCH_SIZE": "4",
        "MAX_TOKEN_LEN": "512",
        "ckpts_home": str(tmp_path / "ckpt"),
        "LOGGER": "['console','jsonl']",
    }
    script = REPO / "examples" / "verl_scripts" / "sft_engine.sh"
    r = subprocess.run(
        ["bash", str(script), f"+trainer.output_dir={tmp_path}/out", "trainer.device=cpu"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2]
    assert any("val/loss" in r for r in rows)


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_verl_gsm8k_sft_example_with_lora_runs(tmp_path: Path, tiny_qwen: Path, mt_data: dict[str, str]) -> None:
    """verl's examples/sft/gsm8k/run_qwen2_5_0_5b_fsdp.sh with USE_PEFT=1 (examples/verl_scripts/sft_gsm8k.sh): one
    epoch of 2 steps with LoRA rank 32; paths, sizes and the logger replaced."""
    env = {
        **_env(),
        "PYTHON": sys.executable,
        "MODEL_PATH": str(tiny_qwen),
        "TRAIN_FILES": mt_data["train"],
        "VAL_FILES": mt_data["test"],
        "MICRO_BATCH_SIZE_PER_GPU": "2",
        "USE_PEFT": "1",
        "LOGGER": "['console','jsonl']",
    }
    script = REPO / "examples" / "verl_scripts" / "sft_gsm8k.sh"
    r = subprocess.run(
        [
            "bash",
            str(script),
            "1",
            str(tmp_path / "ckpt"),
            "data.train_batch_size=4",
            f"+trainer.output_dir={tmp_path}/out",
            "trainer.device=cpu",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(_losses(tmp_path / "out")) == [1, 2]
    assert (tmp_path / "ckpt" / "global_step_2" / "actor" / "model.safetensors").is_file()
