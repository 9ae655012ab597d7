"""Tools the engine itself answers: the plan, and delegation to a sub-agent.

Their functions only validate; the loop applies them (they touch the run, not the sandbox).
"""

from typing import Any

from .base import ToolContext

PLAN_STATUSES = ("pending", "in_progress", "completed", "failed")


def update_plan(ctx: ToolContext, steps: list[dict[str, str]]) -> dict[str, Any]:
    return {"steps": steps}


def delegate(ctx: ToolContext, task: str, kind: str = "general") -> dict[str, Any]:
    return {"task": task, "kind": kind}


UPDATE_PLAN = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 1,
            "maxItems": 20,
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": 200},
                    "status": {"enum": list(PLAN_STATUSES)},
                },
                "required": ["title", "status"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["steps"],
    "additionalProperties": False,
}

DELEGATE = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 5, "maxLength": 2000, "description": "The sub-task."},
        "kind": {"enum": ["file_analysis", "arithmetic", "email_triage", "general"]},
    },
    "required": ["task"],
    "additionalProperties": False,
}
