"""Error messages name the key to change: a malformed list override, a model that ships its own code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verl.config import ConfigError, load_config
from verl.utils.errors import ModelError


@pytest.mark.parametrize("value", ["[console", "console,jsonl]", "[console,,jsonl]"])
def test_malformed_list_override_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("quickstart", ["trainer.total_training_steps=1", f"trainer.logger={value}"])
    text = str(e.value)
    assert text.startswith(f"trainer.logger: cannot parse the value {value!r}"), text
    assert "'trainer.logger=[a,b]'" in text and "hydra.cc" not in text and "\n" not in text


@pytest.fixture(scope="module")
def remote_code_model(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny model re-labelled as a custom architecture whose classes live in the directory."""
    d = tmp_path_factory.mktemp("remote") / "model"
    shutil.copytree(tiny_model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(
        model_type="custom_llama",
        architectures=["CustomModel"],
        auto_map={
            "AutoConfig": "configuration_custom.CustomConfig",
            "AutoModelForCausalLM": "modeling_custom.CustomModel",
        },
    )
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "configuration_custom.py").write_text(
        "from transformers import LlamaConfig\n\n\nclass CustomConfig(LlamaConfig):\n    model_type = 'custom_llama'\n"
    )
    (d / "modeling_custom.py").write_text(
        "from transformers import LlamaForCausalLM\n\n\nclass CustomModel(LlamaForCausalLM):\n    pass\n"
    )
    return d


@pytest.mark.parametrize("key", ["actor_rollout_ref.model.path", "critic.model.path", "model.path"])
def test_remote_code_names_the_trust_key_of_the_section(remote_code_model: Path, key: str) -> None:
    from verl.run.model_access import read_model_config

    section = key.rsplit(".", 1)[0]
    with pytest.raises(
        ModelError,
        match=rf"^{key}: cannot read the model config at .*ships its own Python code.*"
        rf"set {section}\.trust_remote_code=true",
    ):
        read_model_config(key, str(remote_code_model))
    assert read_model_config(key, str(remote_code_model), trust_remote_code=True).model_type == "custom_llama"


def test_sft_names_model_trust_remote_code_before_loading(remote_code_model: Path, tmp_path: Path, monkeypatch) -> None:
    import verl.modules
    from verl.config.sft_loader import load_sft_config
    from verl.trainer.supervised.builders import build_supervised_trainer

    monkeypatch.setattr(verl.modules, "create_model", lambda *a, **k: pytest.fail("a model was built"))
    cfg = load_sft_config(
        None,
        [
            f"model.partial_pretrain={remote_code_model}",
            "data.train_files=builtin://arithmetic_sft/train",
            "data.prompt_key=prompt",
            "data.response_key=response",
            "data.max_length=32",
            f"trainer.default_local_dir={tmp_path}/c",
            f"trainer.output_dir={tmp_path}/o",
        ],
        algorithm="sft",
    )
    with pytest.raises(ModelError, match=r"^model\.partial_pretrain: .*set model\.trust_remote_code=true"):
        build_supervised_trainer(cfg)
