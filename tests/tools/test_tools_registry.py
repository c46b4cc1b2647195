"""load_tools / load_interactions: verl's YAML, class aliases, one-line errors naming file and entry."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from verl.interactions import Gsm8kInteraction, load_interactions, select_interaction
from verl.tools import ToolConfigError, load_tools, tool_schemas
from verl.tools.calculator import CalculatorTool
from verl.tools.code_interpreter import PythonCodeTool
from verl.tools.gsm8k_tool import Gsm8kTool
from verl.tools.isolation import IsolationError, check_isolation
from verl.tools.registry import BUILTIN_CONFIG_DIR

try:
    check_isolation()
    _NO_SANDBOX = ""
except IsolationError as e:  # the code tool refuses to start without bubblewrap
    _NO_SANDBOX = str(e)
needs_sandbox = pytest.mark.skipif(bool(_NO_SANDBOX), reason=f"no OS isolation here: {_NO_SANDBOX}")

# verl's own gsm8k tool config, verbatim apart from comments (examples/sglang_multiturn/config/tool_config)
VERL_GSM8K = """
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k."
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer"
          required: ["answer"]
"""


def _write(tmp_path: Path, text: str, name: str = "tools.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_verl_gsm8k_config_loads(tmp_path):
    tools = load_tools(_write(tmp_path, VERL_GSM8K))
    assert list(tools) == ["calc_gsm8k_reward"]
    assert isinstance(tools["calc_gsm8k_reward"], Gsm8kTool)
    assert tool_schemas(tools)[0]["function"]["parameters"]["required"] == ["answer"]


@needs_sandbox
def test_old_verl_class_path_and_sandbox_fusion_alias(tmp_path):
    text = """
    tools:
      - class_name: verl.workers.tool.gsm8k_tool.Gsm8kTool
        config: {}
      - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool
        config: {default_timeout: 3, memory_limit_mb: 256, num_workers: 1}
    """
    tools = load_tools(_write(tmp_path, text))
    assert isinstance(tools["calc_gsm8k_reward"], Gsm8kTool)
    code = tools["code_interpreter"]
    assert isinstance(code, PythonCodeTool)
    assert (code.limits.timeout_s, code.limits.memory_mb, code.max_concurrency) == (3.0, 256, 1)


@needs_sandbox
def test_builtin_configs_load():
    assert set(load_tools(BUILTIN_CONFIG_DIR / "gsm8k_tool_config.yaml")) == {"calc_gsm8k_reward"}
    assert isinstance(load_tools(BUILTIN_CONFIG_DIR / "calculator_tool_config.yaml")["calculator"], CalculatorTool)
    assert isinstance(
        load_tools(BUILTIN_CONFIG_DIR / "code_interpreter_tool_config.yaml")["code_interpreter"], PythonCodeTool
    )
    inter = load_interactions(BUILTIN_CONFIG_DIR / "gsm8k_interaction_config.yaml")
    assert isinstance(inter["gsm8k"], Gsm8kInteraction)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("tools: [", "not valid YAML"),
        ("other: []", "expected a top-level 'tools:' list"),
        ("tools: {a: 1}", "'tools' must be a list"),
        ("tools:\n  - config: {}", "tools[0]: each entry needs class_name"),
        ("tools:\n  - class_name: nodots", "tools[0] (nodots): class_name must be a dotted import path"),
        ("tools:\n  - class_name: no.such_module.Tool", "cannot import module 'no.such_module'"),
        ("tools:\n  - class_name: verl.tools.calculator.Nope", "has no class 'Nope'"),
        ("tools:\n  - class_name: verl.tools.base.ToolResponse", "is not a subclass of verl.tools.base.BaseTool"),
        (
            "tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n    config: {type: mcp}",
            "config.type='mcp' is not supported yet",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n    config: {speed: 3}",
            "`speed` is not supported yet",
        ),
        ("tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n    extra: 1", "unknown key(s) ['extra']"),
        (
            "tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n    tool_schema: {type: function}",
            "tool_schema must be",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n    tool_schema:\n      type: function\n"
            "      function: {name: c, parameters: {type: 12}}",
            "not a valid JSON Schema",
        ),
        (
            "tools:\n  - class_name: verl.tools.calculator.CalculatorTool\n"
            "  - class_name: verl.tools.calculator.CalculatorTool",
            "tools[1]: duplicate tool name 'calculator'",
        ),
        (
            "tools:\n  - class_name: verl.tools.code_interpreter.PythonCodeTool\n    config: {sandbox_fusion_url: http://x}",
            "`sandbox_fusion_url` is not supported yet",
        ),
    ],
)
def test_bad_tool_files_are_one_line_errors(tmp_path, text, needle):
    path = _write(tmp_path, text)
    with pytest.raises(ToolConfigError) as info:
        load_tools(path)
    message = str(info.value)
    assert needle in message
    assert message.startswith(str(path))
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(ToolConfigError, match="no such file"):
        load_tools(tmp_path / "nope.yaml")


def test_interactions_names_and_selection(tmp_path):
    text = """
    interaction:
      - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
        config: {}
      - name: strict_math
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
    """
    inter = load_interactions(_write(tmp_path, text))
    assert list(inter) == ["gsm8k", "strict_math"]  # name derived from the class as verl does
    assert inter["strict_math"].config["name"] == "strict_math"
    assert select_interaction(inter, {"name": "strict_math"}) is inter["strict_math"]
    with pytest.raises(ValueError, match="is not configured"):
        select_interaction(inter, {"name": "chess"})
    with pytest.raises(ValueError, match="several interactions"):
        select_interaction(inter, {"query": "q"})
    only = {"gsm8k": inter["gsm8k"]}
    assert select_interaction(only, {}) is inter["gsm8k"]


def test_bad_interaction_files(tmp_path):
    dup = (
        "interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n" * 1
        + "  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
    )
    with pytest.raises(ToolConfigError, match=r"interaction\[1\].*duplicate interaction name 'gsm8k'"):
        load_interactions(_write(tmp_path, dup))
    wrong_base = "interaction:\n  - class_name: verl.tools.calculator.CalculatorTool\n"
    with pytest.raises(ToolConfigError, match="not a subclass of verl.tools.base.BaseInteraction"):
        load_interactions(_write(tmp_path, wrong_base, "b.yaml"))
    bad_key = (
        "interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n    config: {retries: 3}\n"
    )
    with pytest.raises(ToolConfigError, match="`retries` is not supported yet"):
        load_interactions(_write(tmp_path, bad_key, "c.yaml"))
