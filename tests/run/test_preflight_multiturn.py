"""Pre-flight of multi-turn runs: broken tool / interaction configs and rows asking for an
interaction the config lacks are one line naming the key, file, entry or row, before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import tiny_run_overrides

from verl.config import load_config
from verl.tools.registry import ToolConfigError
from verl.run.preflight import run_preflight
from verl.utils.errors import DataError, UserError

MT = "actor_rollout_ref.rollout.multi_turn"
CALC = "verl.tools.calculator.CalculatorTool"
GSM8K = "verl.interactions.gsm8k_interaction.Gsm8kInteraction"


def _row(name: str | None = None) -> dict:
    extra = {"interaction_kwargs": {"ground_truth": "2", **({"name": name} if name else {})}}
    return {
        "data_source": "builtin/arithmetic",
        "prompt": [{"role": "user", "content": "1+1="}],
        "reward_model": {"ground_truth": "2"},
        "extra_info": extra,
    }


def _run(tmp_path: Path, **extra) -> list:
    cfg = load_config(
        None,
        tiny_run_overrides(
            tmp_path / "no_model_here", tmp_path, **{f"{MT}.enable": "true", "data.return_raw_chat": "true", **extra}
        ),
    )
    return run_preflight(cfg)


def _yaml(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _fails(kind: type[UserError], tmp_path: Path, *needles: str, **extra) -> None:
    with pytest.raises(kind) as e:
        _run(tmp_path, **extra)
    message = str(e.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_missing_tool_config_file(tmp_path) -> None:
    _fails(
        ToolConfigError,
        tmp_path,
        f"{MT}.tool_config_path",
        f"{tmp_path}/tools.yaml: no such file",
        **{f"{MT}.tool_config_path": str(tmp_path / "tools.yaml")},
    )


def test_unknown_tool_class_name(tmp_path) -> None:
    f = _yaml(tmp_path / "tools.yaml", "tools:\n  - class_name: verl.tools.calculator.NoSuchTool\n")
    _fails(ToolConfigError, tmp_path, f"{f}: tools[0]", "has no class 'NoSuchTool'", **{f"{MT}.tool_config_path": f})


def test_parameters_that_are_not_a_json_schema(tmp_path) -> None:
    f = _yaml(
        tmp_path / "tools.yaml",
        f"""tools:
  - class_name: {CALC}
    tool_schema:
      type: function
      function: {{name: calculator, description: d, parameters: {{type: objekt}}}}
""",
    )
    _fails(
        ToolConfigError,
        tmp_path,
        f"{f}: tools[0]",
        "parameters is not a valid JSON Schema",
        "'objekt'",
        **{f"{MT}.tool_config_path": f},
    )


def test_interaction_entry_without_class_name(tmp_path) -> None:
    f = _yaml(tmp_path / "interactions.yaml", "interaction:\n  - name: gsm8k\n    config: {}\n")
    _fails(
        ToolConfigError,
        tmp_path,
        f"{MT}.interaction_config_path",
        f"{f}: interaction[0]",
        "needs class_name",
        **{f"{MT}.interaction_config_path": f},
    )


def test_unknown_builtin_config_name(tmp_path) -> None:
    _fails(
        ToolConfigError,
        tmp_path,
        f"{MT}.tool_config_path",
        "no built-in tool config 'calculater'",
        **{f"{MT}.tool_config_path": "builtin://calculater"},
    )


def test_row_asking_for_an_interaction_the_config_lacks(tmp_path) -> None:
    f = _yaml(tmp_path / "interactions.yaml", f"interaction:\n  - name: gsm8k\n    class_name: {GSM8K}\n")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [_row("gsm8k"), _row(), _row("gsm8kk")]))
    _fails(
        DataError,
        tmp_path,
        f"data.train_files: {data}: row 2 (line 3): extra_info.interaction_kwargs.name='gsm8kk'",
        f"{MT}.interaction_config_path",
        "['gsm8k']",
        **{f"{MT}.interaction_config_path": f, "data.train_files": str(data)},
    )


def test_valid_configs_pass(tmp_path, tiny_model_dir) -> None:
    f = _yaml(tmp_path / "interactions.yaml", f"interaction:\n  - name: gsm8k\n    class_name: {GSM8K}\n")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [_row("gsm8k"), _row()]))
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            tmp_path,
            **{
                f"{MT}.enable": "true",
                "data.return_raw_chat": "true",
                f"{MT}.interaction_config_path": f,
                f"{MT}.tool_config_path": "builtin://calculator",
                "data.train_files": str(data),
            },
        ),
    )
    check = next(c for c in run_preflight(cfg) if c.name == "multi-turn configs")
    assert check.ok and check.detail == "1 tool(s) ['calculator']; 1 interaction(s) ['gsm8k'] for 2 row(s)"
