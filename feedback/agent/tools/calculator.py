"""Arithmetic without eval: the expression is parsed to an AST and only numbers and
arithmetic operators are walked. Every number stays within MAX_DIGITS digits: an operation that
would go beyond is refused, before it is computed where the size is known in advance, so no
expression burns CPU or memory, and every result can be recorded."""

import ast
import math
import operator
import re
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
MAX_DIGITS = 1000
_LIMIT = 10**MAX_DIGITS
_LIMIT_BITS = _LIMIT.bit_length()
# A percentage: a number, "%" and no operand after it ("15% of 80", "80 * 15%"); "7 % 4", with
# an operand after the sign, stays the remainder. Models write percentages this way (the local
# model gave the calculator "5% of 1040" three times, refused each time, and the run stopped).
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%(?!\s*[\d(.])(\s*of\b)?", re.I)


def _too_large() -> ToolError:
    return ToolError(f"The result is too large: the calculator works with numbers of up to {MAX_DIGITS} digits.")


def _out_of_range(exc: OverflowError) -> ToolError:
    return ToolError(f"The numbers are too large for this operation ({exc}).")


def _check_size(op: type[ast.operator], left: float | int, right: float | int) -> None:
    """Refuse, before computing it, an integer power or product that would exceed MAX_DIGITS."""
    if type(left) is not int or type(right) is not int:
        return  # float arithmetic costs the same whatever the size, and overflows as an error
    # |left| ** right has at least (bits of |left| - 1) * right + 1 bits; a product at least the
    # sum of its factors' bits, less one.
    if op is ast.Pow and right > 0 and (abs(left).bit_length() - 1) * right >= _LIMIT_BITS:
        raise _too_large()
    if op is ast.Mult and left and right and left.bit_length() + right.bit_length() - 1 > _LIMIT_BITS:
        raise _too_large()


def _checked(value: object) -> float | int:
    if isinstance(value, complex):
        raise ToolError("The result is not a real number.")
    if type(value) is int and abs(value) >= _LIMIT:
        raise _too_large()
    return value  # type: ignore[return-value]


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"The exponent is too large (limit {MAX_EXPONENT}).")
        _check_size(type(node.op), left, right)
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as exc:
            raise ToolError("Division by zero.") from exc
        except OverflowError as exc:  # a float beyond its range, or an int too large for one
            raise _out_of_range(exc) from exc
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_evaluate(a) for a in node.args]
        if node.func.id == "round" and len(args) == 2 and type(args[1]) is int and abs(args[1]) > MAX_DIGITS:
            # round(n, -10**9) would compute 10**(10**9) first.
            raise ToolError(f"round() takes at most {MAX_DIGITS} digits.")
        try:
            return _checked(_FUNCTIONS[node.func.id](*args))
        except OverflowError as exc:
            raise _out_of_range(exc) from exc
        except (TypeError, ValueError) as exc:
            raise ToolError(f"Bad call to {node.func.id}: {exc}") from exc
    raise ToolError(f"Unsupported element in expression: {ast.dump(node)[:80]}")


def calculator(ctx: ToolContext, expression: str) -> dict[str, Any]:
    expression = expression.replace("×", "*").replace("÷", "/").replace("^", "**").strip()
    expression = _PERCENT.sub(lambda m: f"({m[1]} / 100)" + (" *" if m[2] else ""), expression)
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
            # No worked example here: a small model copied it as its expression, whatever it was asked.
            "description": "The arithmetic expression to evaluate, written from the task's own numbers. "
            "Supports + - * / // % ** ( ) and sqrt, abs, round, min, max.",
            "minLength": 1,
            "maxLength": MAX_LENGTH,
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}
