"""A calculator tool: safe arithmetic on an ``ast`` parse tree (no ``eval``).

Allowed: int and float literals, ``+ - * / // % **``, unary ``+ -``, parentheses and the
functions ``abs, round, min, max, sqrt``. Everything else (names, attributes, calls to other
functions, strings, comprehensions) is a `ToolError` the model reads. Work is bounded so a model
cannot hang the rollout: at most ``max_expression_length`` characters, exponents up to
``MAX_EXPONENT`` and results up to ``MAX_MAGNITUDE``.
"""

from __future__ import annotations

import ast
import math
import operator
import uuid
from typing import Any, Callable

from verl.tools.base import BaseTool, ToolError, ToolResponse, check_config_keys

__all__ = ["CalculatorTool", "evaluate_expression", "format_number"]

MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e100
# bounds that keep 9**9**9-style inputs from eating the CPU or memory of the rollout

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}

DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression, e.g. '(47 + 38) * 2'.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The arithmetic expression."}},
            "required": ["expression"],
        },
    },
}


def _check(value: Any) -> Any:
    if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
        raise ToolError(f"result too large (over {MAX_MAGNITUDE:g})")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent too large (over {MAX_EXPONENT})")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError("result too large") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        try:
            return _check(_FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError) as e:
            raise ToolError(f"{node.func.id}: {e}") from None
    raise ToolError(f"unsupported syntax: {type(node).__name__}")


def evaluate_expression(expression: str, max_length: int = 200) -> int | float:
    """Evaluates an arithmetic expression safely.

    Args:
        expression: e.g. ``"47*38 + 2**10"``.
        max_length: longest accepted expression, in characters.

    Returns:
        The value (``int`` for integer arithmetic, else ``float``).

    Raises:
        ToolError: syntax error, unsupported syntax, division by zero, bounds exceeded.
    """
    if len(expression) > max_length:
        raise ToolError(f"expression longer than {max_length} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"invalid expression: {e.msg}") from None
    return _eval(tree)


def format_number(value: int | float) -> str:
    """``85`` → ``"85"``, ``85.0`` → ``"85"``, ``2/3`` → ``"0.6666666667"`` (10 significant digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


class CalculatorTool(BaseTool):
    """Arithmetic tool (``calculator(expression=...)``), stateless per trajectory.

    Args:
        config: optional ``max_expression_length`` (characters, default 200).
        tool_schema: default :data:`DEFAULT_SCHEMA`.

    Raises:
        ValueError: unknown config key or a non-positive length.
    """

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: dict[str, Any] | None = None) -> None:
        config = config or {}
        check_config_keys(config, {"max_expression_length"}, "CalculatorTool")
        super().__init__(config, tool_schema or DEFAULT_SCHEMA)
        self.max_expression_length = int(config.get("max_expression_length", 200))
        if self.max_expression_length <= 0:
            raise ValueError(f"max_expression_length must be > 0, got {self.max_expression_length}")

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """No per-trajectory state; returns a fresh id."""
        return instance_id or str(uuid.uuid4()), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Evaluates ``parameters["expression"]``; the response is the formatted number."""
        expression = parameters.get("expression")
        if not isinstance(expression, str):
            raise ToolError("expression must be a string")
        return ToolResponse(text=format_number(evaluate_expression(expression, self.max_expression_length))), 0.0, {}
