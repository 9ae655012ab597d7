"""The Reliability list (docs/reliability.md, linked from the README) and the tests that prove it
match one to one."""

import ast
import re

from django.conf import settings


def _section() -> str:
    readme = (settings.BASE_DIR / "README.md").read_text()
    assert "(docs/reliability.md)" in readme, "the README links the Reliability list"
    return (settings.BASE_DIR / "docs" / "reliability.md").read_text()


def _tests_in(path: str) -> set[str]:
    tree = ast.parse((settings.BASE_DIR / path).read_text())
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    return {f"{path}::{name}" for name in names if name.startswith("test_")}


def test_every_listed_test_exists_and_every_test_of_the_listed_files_is_listed():
    listed = re.findall(r"`(tests/[\w/]+\.py::test_\w+)`", _section())
    assert len(listed) == len(set(listed)), "a test is listed twice"
    files = {entry.split("::")[0] for entry in listed}
    existing = set().union(*(_tests_in(path) for path in files))
    assert set(listed) == existing
