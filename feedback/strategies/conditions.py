"""Whether a strategy applies to a task: its applicable condition.

``{"task_kinds": [...], "keywords": [...], "regex": "..."}``; every part that is present must
match (kinds: any of them; keywords: any of them, case-insensitive, whole words; regex: a
search). An empty condition matches every task.
"""

import re
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern, re.I)
    except re.error:
        return None


def check_condition(condition: Any) -> list[str]:
    """What is wrong with a condition written by a person or a model (empty when fine)."""
    if not isinstance(condition, dict):
        return ["The condition must be an object."]
    problems = []
    unknown = set(condition) - {"task_kinds", "keywords", "regex"}
    if unknown:
        problems.append(f"Unknown keys: {', '.join(sorted(unknown))}.")
    for key in ("task_kinds", "keywords"):
        value = condition.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{key} must be a list of strings.")
    regex = condition.get("regex", "")
    if not isinstance(regex, str):
        problems.append("regex must be a string.")
    elif regex and _compiled(regex) is None:
        problems.append(f"regex {regex!r} is not a valid regular expression.")
    return problems


def matches(condition: dict, *, task_kind: str, text: str) -> bool:
    kinds = condition.get("task_kinds") or []
    if kinds and task_kind not in kinds:
        return False
    keywords = condition.get("keywords") or []
    if keywords and not any(re.search(rf"\b{re.escape(k)}\b", text, re.I) for k in keywords):
        return False
    regex = condition.get("regex") or ""
    if regex:
        compiled = _compiled(regex)
        if compiled is None or not compiled.search(text):
            return False
    return True
