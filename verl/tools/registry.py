"""Loading tools from verl's tool config file (``multi_turn.tool_config_path``).

The file is verl's YAML format::

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool      # import path of a BaseTool subclass
        config: {type: native}                           # passed to the tool; type: native (default)
        tool_schema:                                     # OpenAI function format (optional if built in)
          type: function
          function:
            name: calc_gsm8k_reward
            description: ...
            parameters: {type: object, properties: {answer: {type: string}}, required: [answer]}

Class paths of verl's own tools that exist here under another name are mapped (see
:data:`CLASS_ALIASES`), so verl's recipes load unchanged. Every problem with the file is one
:class:`ToolConfigError` line that names the file and the entry (``tools[i]``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import jsonschema
from omegaconf import OmegaConf

from verl.tools.base import BaseTool
from verl.utils.errors import UserError

__all__ = [
    "BUILTIN_CONFIG_DIR",
    "CLASS_ALIASES",
    "ToolConfigError",
    "import_class",
    "load_tool_schemas",
    "load_tools",
    "tool_schemas",
]

CLASS_ALIASES: dict[str, str] = {
    # verl <= 0.4 kept its tools under workers/tool
    "verl.workers.tool.gsm8k_tool.Gsm8kTool": "verl.tools.gsm8k_tool.Gsm8kTool",
    # verl's remote code sandbox: here code runs in the local sandbox (verl.tools.sandbox)
    "verl.tools.sandbox_fusion_tools.SandboxFusionTool": "verl.tools.code_interpreter.PythonCodeTool",
    "verl.workers.tool.sandbox_fusion_tools.SandboxFusionTool": "verl.tools.code_interpreter.PythonCodeTool",
}


class ToolConfigError(UserError, ValueError):
    """A bad tool or interaction config file (the message names the file and the entry)."""

    kind = "tool config error"


def import_class(class_name: str, base: type, where: str) -> type:
    """Imports ``package.module.ClassName`` (after :data:`CLASS_ALIASES`) and checks its base.

    Args:
        class_name: dotted import path.
        base: required base class (`BaseTool` or `BaseInteraction`).
        where: ``"<file>: tools[3]"``, prefixed to error messages.

    Raises:
        ToolConfigError: not a dotted path, the module or class is missing, or wrong base.
    """
    resolved = CLASS_ALIASES.get(class_name, class_name)
    if not isinstance(resolved, str) or "." not in resolved:
        raise ToolConfigError(f"{where}: class_name must be a dotted import path, got {class_name!r}")
    module_name, _, attr = resolved.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ToolConfigError(f"{where}: cannot import module {module_name!r} of class_name {class_name!r}: {e}") from e
    cls = getattr(module, attr, None)
    if cls is None:
        raise ToolConfigError(f"{where}: module {module_name!r} has no class {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ToolConfigError(f"{where}: {class_name!r} is not a subclass of {base.__module__}.{base.__name__}")
    return cls


def _load_yaml(path: str | Path, top_key: str) -> list[Any]:
    """The list under ``top_key`` of a YAML file, as plain containers (interpolations resolved)."""
    p = Path(path)
    if not p.is_file():
        raise ToolConfigError(f"{path}: no such file")
    try:
        data = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    except Exception as e:  # omegaconf / yaml raise many types for a malformed file
        raise ToolConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict) or top_key not in data:
        raise ToolConfigError(f"{path}: expected a top-level '{top_key}:' list")
    entries = data[top_key]
    if not isinstance(entries, list):
        raise ToolConfigError(f"{path}: '{top_key}' must be a list, got {type(entries).__name__}")
    return entries


def _check_schema(schema: Any, where: str) -> None:
    """Checks an OpenAI function schema; its ``parameters`` must be a valid JSON Schema."""
    if not isinstance(schema, dict) or schema.get("type") != "function" or not isinstance(schema.get("function"), dict):
        raise ToolConfigError(
            f"{where}: tool_schema must be {{type: function, function: {{name, description, parameters}}}}"
        )
    name = schema["function"].get("name")
    if not isinstance(name, str) or not name:
        raise ToolConfigError(f"{where}: tool_schema.function.name must be a non-empty string")
    params = schema["function"].get("parameters")
    if params is not None:
        try:
            jsonschema.validators.validator_for(params).check_schema(params)
        except jsonschema.SchemaError as e:
            raise ToolConfigError(
                f"{where}: tool_schema.function.parameters is not a valid JSON Schema: {e.message}"
            ) from e


def _build_tool(entry: Any, where: str) -> BaseTool:
    if not isinstance(entry, dict) or "class_name" not in entry:
        raise ToolConfigError(f"{where}: each entry needs class_name (and optional config, tool_schema)")
    unknown = sorted(set(entry) - {"class_name", "config", "tool_schema"})
    if unknown:
        raise ToolConfigError(f"{where}: unknown key(s) {unknown}; allowed: class_name, config, tool_schema")
    where = f"{where} ({entry['class_name']})"
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ToolConfigError(f"{where}: config must be a mapping")
    tool_type = config.get("type", "native")
    if tool_type != "native":
        raise ToolConfigError(
            f"{where}: config.type={tool_type!r} is not supported yet: only 'native' tools (no MCP servers)"
        )
    cls = import_class(entry["class_name"], BaseTool, where)
    schema = entry.get("tool_schema")
    if schema is not None:
        _check_schema(schema, where)
    try:
        tool = cls(config=config, tool_schema=schema)
    except ToolConfigError:
        raise
    except Exception as e:  # a tool's own config check: keep its message, add where it came from
        raise ToolConfigError(f"{where}: {type(e).__name__}: {e}") from e
    _check_schema(tool.tool_schema, where)
    return tool


def load_tools(tool_config_path: str | Path) -> dict[str, BaseTool]:
    """Builds every tool of a verl tool config file.

    Args:
        tool_config_path: the YAML file (``actor_rollout_ref.rollout.multi_turn.tool_config_path``).

    Returns:
        ``{function name: tool}`` in file order (the name is ``tool_schema.function.name``).

    Raises:
        ToolConfigError: one line naming the file and entry: missing file, bad YAML, no
            ``tools`` list, unknown keys, unimportable class, not a `BaseTool`, ``config.type``
            other than ``native``, invalid schema, the tool's own config error, duplicate name.
    """
    tools: dict[str, BaseTool] = {}
    for i, entry in enumerate(_load_yaml(tool_config_path, "tools")):
        where = f"{tool_config_path}: tools[{i}]"
        tool = _build_tool(entry, where)
        if tool.name in tools:
            raise ToolConfigError(f"{where}: duplicate tool name {tool.name!r}")
        tools[tool.name] = tool
    return tools


def tool_schemas(tools: dict[str, BaseTool]) -> list[dict[str, Any]]:
    """The OpenAI function schemas to pass as ``apply_chat_template(..., tools=...)``, in order."""
    return [tool.tool_schema for tool in tools.values()]


def load_tool_schemas(tool_config_path: str | Path) -> list[dict[str, Any]]:
    """`tool_schemas` of the tools a config file defines (``data.tool_config_path``: the RL
    dataset's ``filter_overlong_prompts`` measures prompts with them rendered, as verl's does).

    Raises:
        ToolConfigError: as `load_tools`.
    """
    return tool_schemas(load_tools(tool_config_path))


BUILTIN_CONFIG_DIR = Path(__file__).with_name("configs")
# shipped configs: gsm8k_tool_config.yaml, calculator_tool_config.yaml,
# code_interpreter_tool_config.yaml, gsm8k_interaction_config.yaml
