"""Arithmetic without eval: the expression is parsed to an AST and only numbers and
arithmetic operators are walked."""

import ast
import math
import operator
from typing import Any

from .base import ToolContext, ToolError

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max}
MAX_EXPONENT = 1000
MAX_LENGTH = 500


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"Exponent {right} is too large (limit {MAX_EXPONENT}).")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as exc:
            raise ToolError("Division by zero.") from exc
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        try:
            return _FUNCTIONS[node.func.id](*[_evaluate(a) for a in node.args])
        except (TypeError, ValueError) as exc:
            raise ToolError(f"Bad call to {node.func.id}: {exc}") from exc
    raise ToolError(f"Unsupported element in expression: {ast.dump(node)[:80]}")


def calculator(ctx: ToolContext, expression: str) -> dict[str, Any]:
    expression = expression.replace("×", "*").replace("÷", "/").replace("^", "**").strip()
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"The expression is longer than {MAX_LENGTH} characters.")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"Not an arithmetic expression: {expression!r}.") from exc
    value = _evaluate(tree)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError("The result is not a finite number.")
        value = round(value, 10)
        if value.is_integer():
            value = int(value)
    return {"expression": expression, "value": value}


CALCULATOR = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "description": "An arithmetic expression, e.g. '(17 * 23 + 4) / 3'. "
            "Supports + - * / // % ** and sqrt, abs, round, min, max.",
            "minLength": 1,
            "maxLength": MAX_LENGTH,
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}
