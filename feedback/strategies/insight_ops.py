"""An insight list and its operations, as in ExpeL (Zhao et al. 2023): pure values, no database.

A list is ``[{"id": ..., "text": ..., "votes": n}, ...]``, kept best voted first (ties in the order
they came); an insight's id is its own for life (an edit keeps it), so two versions' lists compare
insight by insight (``insights_diff``).
Comparing a failed run with a successful one, a writer (insight_writer.py) returns operations:

- ``ADD text``: a new insight, with START_VOTES votes (an ADD of an insight already listed, in
  other case or spacing, is an up-vote of it: the list holds no duplicates);
- ``EDIT i text``: insight i (numbered from 1, as the writer was shown the list) reworded, +1;
- ``UPVOTE i``: +1; ``DOWNVOTE i``: -1.

An insight at 0 votes falls away; beyond MAX_INSIGHTS the lowest voted fall away (the newest of
equal votes first: an older insight has held its place longer). An operation that cannot be read
or applied (an unknown name, an index off the list, an empty or overlong text) is ignored with
its reason, never raised: a writer's mistake costs its operation, not the update.
"""

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from feedback.storable import unstorable

START_VOTES = 2
MAX_INSIGHTS = 10
MAX_TEXT = 300
ACTIONS = ("ADD", "EDIT", "UPVOTE", "DOWNVOTE")
_NEEDS_TEXT = ("ADD", "EDIT")
_NEEDS_INDEX = ("EDIT", "UPVOTE", "DOWNVOTE")


@dataclass(frozen=True)
class Operation:
    op: str
    index: int = 0  # 1-based; 0 for ADD
    text: str = ""

    def as_json(self) -> dict:
        return {"op": self.op, "index": self.index, "text": self.text}

    def __str__(self) -> str:
        return " ".join(str(p) for p in (self.op, self.index or "", self.text) if p != "")


@dataclass(frozen=True)
class Ignored:
    operation: Any
    reason: str

    def as_json(self) -> dict:
        shown = self.operation.as_json() if isinstance(self.operation, Operation) else self.operation
        # What a model wrote may be anything: kept short, as text if it is not plain JSON.
        if not isinstance(shown, dict | str | int | float | bool | None):
            shown = repr(shown)[:500]
        return {"operation": shown, "reason": self.reason}


def _clean_text(text: str) -> str:
    return " ".join(text.split())


def _same(a: str, b: str) -> bool:
    return _clean_text(a).casefold() == _clean_text(b).casefold()


def check_insights(value: Any) -> list[str]:
    """What makes ``value`` no insight list (empty: it is one)."""
    if not isinstance(value, list):
        return ['The insights are a list of {"id", "text", "votes"} objects.']
    problems, ids = [], set()
    if len(value) > MAX_INSIGHTS:
        problems.append(f"At most {MAX_INSIGHTS} insights, not {len(value)}.")
    for n, item in enumerate(value, start=1):
        if not isinstance(item, dict) or set(item) != {"id", "text", "votes"}:
            problems.append(f'Insight {n} is not an object of exactly "id", "text" and "votes".')
            continue
        key, text, votes = item["id"], item["text"], item["votes"]
        if not isinstance(key, str) or not 1 <= len(key) <= 32 or key in ids or not key.isalnum():
            problems.append(f"Insight {n}'s id must be 1 to 32 letters or digits, unique in the list.")
        ids.add(key)
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
            problems.append(f"Insight {n}'s text must be 1 to {MAX_TEXT} characters.")
        if isinstance(votes, bool) or not isinstance(votes, int) or votes < 1:
            problems.append(f"Insight {n}'s votes must be a whole number of at least 1.")
        problems += unstorable(text, name=f"insights[{n}].text") if isinstance(text, str) else []
    return problems


def parse_operations(data: Any) -> tuple[list[Operation], list[Ignored]]:
    """A writer's answer, ``{"operations": [{"op", "index", "text"}, ...]}``, read strictly: each
    operation that is not well formed is ignored with its reason."""
    if not isinstance(data, dict) or not isinstance(data.get("operations"), list):
        return [], [Ignored(data if isinstance(data, dict | list | str) else repr(data), 'not {"operations": [...]}')]
    ops, ignored = [], []
    for raw in data["operations"]:
        op, problem = _operation(raw)
        if op is None:
            ignored.append(Ignored(raw, problem))
        else:
            ops.append(op)
    return ops, ignored


def _operation(raw: Any) -> tuple[Operation | None, str]:
    if not isinstance(raw, dict):
        return None, "not an object"
    name = raw.get("op")
    if not isinstance(name, str) or name.strip().upper() not in ACTIONS:
        return None, f"unknown operation {name!r}: one of {', '.join(ACTIONS)}"
    name = name.strip().upper()
    index, text = raw.get("index", 0), raw.get("text", "")
    if name in _NEEDS_INDEX and (isinstance(index, bool) or not isinstance(index, int) or index < 1):
        return None, f"{name} needs the number of an insight (1 or more), not {index!r}"
    if not isinstance(text, str):
        return None, f"the text is not a string: {text!r}"
    text = _clean_text(text)
    if name in _NEEDS_TEXT and not text:
        return None, f"{name} needs a text"
    if len(text) > MAX_TEXT:
        return None, f"the text is longer than {MAX_TEXT} characters"
    if unstorable(text):
        return None, "the text holds a character that cannot be stored"
    return Operation(name, index if name in _NEEDS_INDEX else 0, text if name in _NEEDS_TEXT else ""), ""


def apply_operations(
    insights: list[dict], ops: Iterable[Operation]
) -> tuple[list[dict], list[Operation], list[Ignored]]:
    """(the new list, the operations applied, those ignored). Indices are the list's numbering as
    given (the writer's view), whatever the operations before them did."""
    items = [dict(i) for i in insights]
    shown = len(items)
    applied, ignored = [], []
    for op in ops:
        if op.op in _NEEDS_INDEX and op.index > shown:
            ignored.append(Ignored(op, f"there is no insight {op.index} (the list has {shown})"))
            continue
        if op.op == "ADD":
            twin = next((item for item in items if _same(item["text"], op.text)), None)
            if twin is not None:
                twin["votes"] += 1  # said again: confirmed, not duplicated
            else:
                items.append({"id": uuid.uuid4().hex[:12], "text": op.text, "votes": START_VOTES})
        elif op.op == "EDIT":
            item = items[op.index - 1]
            item["text"], item["votes"] = op.text, item["votes"] + 1
        else:
            items[op.index - 1]["votes"] += 1 if op.op == "UPVOTE" else -1
        applied.append(op)
    kept = [item for item in items if item["votes"] > 0]
    kept.sort(key=lambda item: -item["votes"])  # stable: equal votes keep their order
    return kept[:MAX_INSIGHTS], applied, ignored


def numbered(insights: list[dict]) -> str:
    """The list as a writer is shown it: "1. text (votes: n)" per line; "(none yet)" when empty."""
    if not insights:
        return "(none yet)"
    return "\n".join(f"{n}. {item['text']} (votes: {item['votes']})" for n, item in enumerate(insights, start=1))


def insights_diff(old: list[dict], new: list[dict]) -> list[dict]:
    """What changed from ``old`` to ``new``, for the reviewer, insight by insight (by its id):
    ``added``, ``edited`` (its text changed; its votes too), ``votes`` (only they changed) or
    ``removed``; unchanged ones are left out."""
    before = {i["id"]: i for i in old}
    after = {i["id"]: i for i in new}
    changes = []
    for key, item in after.items():
        was = before.get(key)
        if was is None:
            changes.append({"change": "added", "text": item["text"], "votes": item["votes"]})
        elif was["text"] != item["text"]:
            changes.append(
                {
                    "change": "edited",
                    "old_text": was["text"],
                    "text": item["text"],
                    "old_votes": was["votes"],
                    "votes": item["votes"],
                }
            )
        elif was["votes"] != item["votes"]:
            changes.append({"change": "votes", "text": item["text"], "old_votes": was["votes"], "votes": item["votes"]})
    gone = [item for key, item in before.items() if key not in after]
    changes += [{"change": "removed", "text": item["text"], "old_votes": item["votes"]} for item in gone]
    order = {"added": 0, "edited": 1, "votes": 2, "removed": 3}
    return sorted(changes, key=lambda c: order[c["change"]])
