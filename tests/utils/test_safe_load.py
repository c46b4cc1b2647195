"""Pickles that reference code are refused without running, in one line naming the file and the
safe formats, and torch's advice to retry with ``weights_only=False`` is never relayed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from verl.utils.errors import CheckpointLoadError, ModelError


class _Payload:
    marker = ""

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _evil(path: Path, marker: Path) -> Path:
    payload = _Payload()
    payload.marker = str(marker)
    torch.save({"x": payload}, path)
    return path


def _assert_safe_message(text: str, marker: Path) -> None:
    assert "\n" not in text
    assert "weights_only" not in text and "safe_globals" not in text and "trusted source" not in text, text
    assert not marker.exists()  # the payload never ran


@pytest.fixture(scope="module")
def pickled_model(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """The tiny model with its safetensors replaced by a pytorch_model.bin that runs a command."""
    import shutil

    root = tmp_path_factory.mktemp("pickled")
    model = root / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "model.safetensors").unlink()
    marker = root / "PAYLOAD_RAN"
    _evil(model / "pytorch_model.bin", marker)
    return model, marker


def test_create_model_refuses_a_code_pickle_in_one_line(pickled_model) -> None:
    from verl.config.schema import ModelConfig
    from verl.modules import create_model

    model, marker = pickled_model
    with pytest.raises(ModelError) as e:
        create_model("actor", ModelConfig(path=str(model)))
    text = str(e.value)
    assert text.startswith(
        f"{model / 'pytorch_model.bin'}: not loaded as weights: it is a pickle that references posix.system"
    ), text
    assert "safetensors" in text
    _assert_safe_message(text, marker)


def test_preflight_names_the_file(pickled_model) -> None:
    from verl.run.preflight import check_weight_files

    model, marker = pickled_model
    with pytest.raises(
        ModelError, match=r"pytorch_model\.bin is not a loadable weights file .*posix\.system.*safetensors"
    ):
        check_weight_files(model)
    assert not marker.exists()


def test_cli_prints_one_model_error_line(pickled_model, tmp_path, capsys) -> None:
    from verl.cli import main

    model, marker = pickled_model
    rc = main(
        [
            "generate",
            f"model.path={model}",
            "data.path=builtin://arithmetic/test",
            f"data.output_path={tmp_path / 'g.jsonl'}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("verl generate: model error: ") and "pytorch_model.bin" in err[-1], err
    assert "Traceback" not in "\n".join(err)
    _assert_safe_message(err[-1], marker)


def test_optimizer_state_names_the_file_and_key(tmp_path) -> None:
    from verl.config.schema import FSDPConfig, OptimConfig
    from verl.engine import build_engine
    from verl.engine.state_io import load_engine_state, save_engine_state

    engine = build_engine(torch.nn.Linear(2, 2), FSDPConfig(), 1, optim=OptimConfig(lr=0.1), total_steps=2)
    save_engine_state(engine.module, engine.optimizer, None, tmp_path / "actor")
    marker = tmp_path / "PAYLOAD_RAN"
    _evil(tmp_path / "actor" / "optim.pt", marker)
    with pytest.raises(CheckpointLoadError) as e:
        load_engine_state(engine.module, engine.optimizer, None, tmp_path / "actor")
    text = str(e.value)
    assert f"optimizer state {tmp_path / 'actor' / 'optim.pt'}" in text and "trainer.resume_from_path" in text, text
    assert "posix.system" in text
    _assert_safe_message(text, marker)


def test_relayed_torch_errors_drop_the_advice(tmp_path) -> None:
    from verl.run.io_errors import load_errors
    from verl.utils.safe_load import strip_unsafe_advice

    marker = tmp_path / "PAYLOAD_RAN"
    f = _evil(tmp_path / "state.pt", marker)
    with pytest.raises(CheckpointLoadError) as e:
        with load_errors(tmp_path):
            torch.load(f, weights_only=True)
    _assert_safe_message(str(e.value), marker)
    try:
        torch.load(f, weights_only=True)
    except Exception as raw:  # noqa: BLE001
        assert "weights_only" in str(raw)  # torch's text does carry the advice ...
        _assert_safe_message(strip_unsafe_advice(str(raw)), marker)  # ... which is removed
