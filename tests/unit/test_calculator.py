import pytest

from feedback.agent.tools import ToolContext, ToolError
from feedback.agent.tools.calculator import calculator

CTX = ToolContext(run_id=0, workspace=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2", 3),
        ("(17 * 23 + 4) / 5", 79),
        ("2 ** 10", 1024),
        ("2 ^ 3", 8),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("-3 + +5", 2),
        ("sqrt(16)", 4),
        ("1 / 3", 0.3333333333),
        ("6 × 7", 42),
        ("max(3, 9, 4)", 9),
        # Percentages as people (and models) write them; "%" before an operand is the remainder.
        ("5% of 1040", 52),
        ("15 % of 200", 30),
        ("2.5% OF (100 + 100)", 5),
        ("5% * 1040", 52),
        ("1040 * 5%", 52),
        ("(50%) + 1", 1.5),
        ("7 % (4)", 3),
        ("7.5 % 2", 1.5),
    ],
)
def test_it_computes(expression, value):
    assert calculator(CTX, expression)["value"] == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "Division by zero"),
        ("__import__('os').system('id')", "Unsupported"),
        ("open('/etc/passwd')", "Unsupported"),
        ("2 ** 100000", "too large"),
        ("1 +", "Not an arithmetic expression"),
        ("'a' * 3", "Unsupported"),
        ("x + 1", "Unsupported"),
        ("sqrt(-1)", "Bad call"),
        ("1" * 600, "longer than"),
    ],
)
def test_it_refuses(expression, message):
    with pytest.raises(ToolError, match=message):
        calculator(CTX, expression)
