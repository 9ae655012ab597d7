"""Whether a strategy applies to a task: its applicable condition.

``{"task_kinds": [...], "keywords": [...], "regex": "..."}``; every part that is present must
match (kinds: any of them; keywords: any of them, case-insensitive, whole words; regex: a
case-insensitive search, run on RE2 like every pattern a person or a model writes: see
feedback/saferegex.py). An empty condition matches every task.
"""

import re
from typing import Any

from feedback import saferegex


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
    elif regex and (why := saferegex.problem(regex, ignore_case=True)):
        problems.append(f"regex: {why}")
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
        if not isinstance(regex, str):
            return False
        # Saved before RE2 (or written around the checks): matches nothing, logged once.
        compiled = saferegex.stored(regex, ignore_case=True, where="A strategy condition")
        if compiled is None or not compiled.search(saferegex.text(text)):
            return False
    return True
