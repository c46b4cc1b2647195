"""Pre-flight checks (issue 12.1): each minimal bad input is one UserError naming the cause,
raised before any model loads; the good config passes every check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_helpers import tiny_run_overrides

from verl.config import load_config
from verl.run.preflight import estimate_checkpoint_bytes, run_preflight
from verl.utils.errors import DataError, DiskError, ModelError, PreflightError, RewardFunctionError, UserError

ROW = {
    "data_source": "builtin/arithmetic",
    "prompt": [{"role": "user", "content": "1+1="}],
    "reward_model": {"ground_truth": "2"},
}


def _cfg(model_dir: Path, run_dir: Path, **extra):
    return load_config(None, tiny_run_overrides(model_dir, run_dir, **extra))


def _jsonl(path: Path, rows: list[dict], raw_line: bytes | None = None) -> Path:
    lines = [json.dumps(r).encode() for r in rows]
    if raw_line is not None:
        lines.insert(1, raw_line)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _failure(cfg, kind: type[UserError], *needles: str) -> str:
    with pytest.raises(kind) as info:
        run_preflight(cfg)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_good_config_passes_every_check(tiny_model_dir, tmp_path):
    checks = run_preflight(_cfg(tiny_model_dir, tmp_path, **{"trainer.save_freq": 1}), raise_on_failure=False)
    assert [c.name for c in checks] == [
        "paths",
        "checkpoint folder",
        "data",
        "reward function",
        "multi-turn configs",
        "model",
        "pad token",
        "half precision",
    ]
    assert checks[4].ok is None  # no tools or interactions configured
    assert all(c.ok for c in checks[:4] + checks[5:-1]), checks
    assert checks[-1].ok is None and checks[-1].detail == "skipped"  # float32 run: no half precision to measure
    assert "compute_score(data_source, solution_str, ground_truth, extra_info=None)" in checks[3].detail


def test_unknown_data_source(tiny_model_dir, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [ROW, {**ROW, "data_source": "my/unknown"}])
    cfg = _cfg(tiny_model_dir, tmp_path, **{"data.train_files": str(data), "custom_reward_function.path": "null"})
    _failure(cfg, PreflightError, "data_source 'my/unknown'", str(data), "custom_reward_function.path")


def test_non_utf8_data_names_file_and_line(tiny_model_dir, tmp_path):
    data = _jsonl(tmp_path / "bad.jsonl", [ROW, ROW], raw_line=b'{"data_source": "caf\xe9"}')
    _failure(
        _cfg(tiny_model_dir, tmp_path, **{"data.train_files": str(data)}), DataError, f"{data}: line 2", "UTF-8", "0xe9"
    )


def test_missing_reward_function_name(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path, **{"custom_reward_function.name": "my_reward"})
    _failure(cfg, RewardFunctionError, "'my_reward' not found", "compute_score")


def test_wrong_reward_signature(tiny_model_dir, tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def compute_score(text, answer):\n    return 1.0\n")
    cfg = _cfg(tiny_model_dir, tmp_path, **{"custom_reward_function.path": str(reward)})
    _failure(cfg, RewardFunctionError, "compute_score(text, answer)", "data_source=...")


def test_batch_manager_needs_plural_keywords(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path, **{"reward_model.reward_manager": "batch"})
    _failure(cfg, RewardFunctionError, "data_sources=...", "'batch'")


def test_vocabulary_larger_than_embedding(tiny_model_dir, tmp_path, shared_dir):
    cfg = _cfg(tiny_model_dir, tmp_path, **{"data.tokenizer": str(shared_dir / "tokenizers" / "gpt2")})
    _failure(cfg, ModelError, "50257 tokens", f"{tiny_model_dir}", "rows")


def _copy_model(src: Path, dst: Path, **config_changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(config_changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_short_context_model(tiny_model_dir, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "short", max_position_embeddings=16)
    _failure(_cfg(model, tmp_path), ModelError, "24 + 6 = 30 tokens", "context of 16")


def test_non_weights_file_in_model_dir(tiny_model_dir, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "garbage")
    (model / "model.safetensors").write_bytes(b"this is not a weights file at all")
    _failure(_cfg(model, tmp_path), ModelError, "model.safetensors is not a loadable weights file")
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"\x80\x04pickled")
    _failure(_cfg(model, tmp_path), ModelError, "pytorch_model.bin", "torch zip archive")


def test_checkpoint_path_is_a_file(tiny_model_dir, tmp_path):
    (tmp_path / "ckpt_file").write_text("x")
    cfg = _cfg(tiny_model_dir, tmp_path, **{"trainer.default_local_dir": str(tmp_path / "ckpt_file")})
    _failure(cfg, DiskError, "trainer.default_local_dir", "ckpt_file exists and is not a directory")
    cfg = _cfg(tiny_model_dir, tmp_path, **{"trainer.default_local_dir": str(tmp_path / "ckpt_file" / "sub")})
    _failure(cfg, DiskError, "is a file")


def test_unwritable_output_dir(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path, **{"trainer.output_dir": "/proc/verl-preflight-test/out"})
    _failure(cfg, DiskError, "trainer.output_dir", "/proc is not writable")


def test_no_room_for_a_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    import verl.run.preflight as pf

    cfg = _cfg(tiny_model_dir, tmp_path, **{"trainer.save_freq": 1})
    need = estimate_checkpoint_bytes(cfg)
    monkeypatch.setattr(
        pf.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - need + 1, need - 1)
    )
    _failure(cfg, DiskError, "free, one checkpoint needs about")


def test_checkpoint_estimate_counts_parameters(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).parameters())
    assert estimate_checkpoint_bytes(_cfg(tiny_model_dir, tmp_path)) == 12 * n
    gae = _cfg(tiny_model_dir, tmp_path, **{"algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1})
    assert estimate_checkpoint_bytes(gae) > 12 * n  # + the critic (value head instead of lm_head)


def test_pad_token_choice_is_reported(tiny_model_dir, tmp_path, shared_dir):
    checks = run_preflight(_cfg(tiny_model_dir, tmp_path, **{"trainer.save_freq": -1}), raise_on_failure=False)
    assert "pad token '<pad>'" in checks[-2].detail


def test_missing_model_is_one_line_naming_the_key(tmp_path, monkeypatch):
    """`verl train` loads the tokenizer first and `verl plan` the model config: a path that does
    not exist is a ModelError naming the key (not transformers' multi-line OSError)."""
    from verl.config import load_config
    from verl.run.model_access import load_run_tokenizer
    from verl.commands.plan import ModelShape
    from verl.utils.errors import ModelError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = str(tmp_path / "nomodel")
    cfg = load_config("quickstart", [f"actor_rollout_ref.model.path={missing}"])
    with pytest.raises(ModelError) as e:
        load_run_tokenizer(cfg)
    assert str(e.value).startswith(f"actor_rollout_ref.model.path: cannot load the tokenizer at {missing} (")
    assert "no local directory" in str(e.value) and "hub is offline" in str(e.value) and "\n" not in str(e.value)
    cfg = load_config("quickstart", [f"actor_rollout_ref.model.tokenizer_path={missing}"])
    with pytest.raises(ModelError, match=r"^actor_rollout_ref\.model\.tokenizer_path: cannot load the tokenizer"):
        load_run_tokenizer(cfg)
    with pytest.raises(ModelError, match=r"^critic\.model\.path: cannot read the model config at .*no local directory"):
        ModelShape.from_path(missing, "critic.model.path")


def test_a_missing_data_file_names_its_key(tiny_model_dir, tmp_path):
    missing = tmp_path / "nope.jsonl"
    _failure(
        _cfg(tiny_model_dir, tmp_path, **{"data.train_files": f"[{missing}]"}),
        DataError,
        f"data.train_files: data file not found: {missing}",
    )
    _failure(
        _cfg(tiny_model_dir, tmp_path, **{"data.val_files": f"[{missing}]"}),
        DataError,
        f"data.val_files: data file not found: {missing}",
    )
