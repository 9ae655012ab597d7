"""Evaluation profiles: per task kind, which evaluators run and how much each one weighs.

Profiles live in the database (``EvaluationProfile``, editable in the admin); a kind without a
row gets the default below, created on first use, so a fresh database needs no setup. A changed
default reaches stored rows that still hold the old one by a data migration (0022 for triage).
"""

from typing import Any

from feedback import saferegex
from feedback.models import EvaluationProfile, Task

EVALUATOR_NAMES = ("rule", "reference", "judge")

# Substrings, as the rule matches keywords: "mail" is in "emails" and "e-mail".
TRIAGE_WORDS = ["mail", "message", "inbox", "ticket", "urgent", "urgency", "priority"]
URGENCY_OPPOSITES = {"urgent": ["not urgent", "non-urgent", "low priority", "not a priority", "no rush", "can wait"]}

DEFAULT_PROFILES: dict[str, list[dict[str, Any]]] = {
    Task.Kind.ARITHMETIC: [
        # A number answer is right or wrong: the reference decides most of the score.
        {"evaluator": "reference", "weight": 0.6, "config": {"mode": "auto", "tolerance": 1e-6}},
        {"evaluator": "rule", "weight": 0.1, "config": {"min_length": 1, "format_regex": r".*\d.*"}},
        {"evaluator": "judge", "weight": 0.3, "config": {}},
    ],
    Task.Kind.FILE_ANALYSIS: [
        {"evaluator": "rule", "weight": 0.3, "config": {"min_length": 40}},
        {"evaluator": "reference", "weight": 0.3, "config": {"mode": "auto"}},
        {"evaluator": "judge", "weight": 0.4, "config": {}},
    ],
    Task.Kind.EMAIL_TRIAGE: [
        # What every triage answer has: it speaks of the emails or of their urgency. Not one
        # label, nor a length: an inbox with no urgent email is rightly answered "None are urgent".
        {"evaluator": "rule", "weight": 0.3, "config": {"any_keywords": TRIAGE_WORDS}},
        # Whichever of urgent and low priority is expected, an answer asserting the other is wrong.
        {"evaluator": "reference", "weight": 0.4, "config": {"mode": "auto", "contradictions": URGENCY_OPPOSITES}},
        {"evaluator": "judge", "weight": 0.3, "config": {}},
    ],
    Task.Kind.GENERAL: [
        {"evaluator": "rule", "weight": 0.3, "config": {"min_length": 20}},
        {"evaluator": "reference", "weight": 0.2, "config": {"mode": "auto"}},
        {"evaluator": "judge", "weight": 0.5, "config": {}},
    ],
}


def check_evaluators(entries: Any) -> list[str]:
    """What is wrong with a profile's evaluator list (empty when it is fine)."""
    if not isinstance(entries, list) or not entries:
        return ["Give a non-empty list of evaluators."]
    problems = []
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            problems.append(f"Entry {i} must be an object.")
            continue
        if entry.get("evaluator") not in EVALUATOR_NAMES:
            problems.append(f"Entry {i}: evaluator must be one of {', '.join(EVALUATOR_NAMES)}.")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            problems.append(f"Entry {i}: weight must be a number ≥ 0.")
        config = entry.get("config", {})
        if not isinstance(config, dict):
            problems.append(f"Entry {i}: config must be an object.")
        elif entry.get("evaluator") == "rule" and (why := _format_problem(config)):
            problems.append(f"Entry {i}: format_regex: {why}")
    return problems


def _format_problem(config: dict) -> str:
    pattern = config.get("format_regex")
    return saferegex.problem(pattern, dot_all=True) if pattern else ""


def profile_for(task_kind: str) -> EvaluationProfile:
    """The kind's profile, created from the defaults the first time it is needed."""
    defaults = DEFAULT_PROFILES.get(task_kind, DEFAULT_PROFILES[Task.Kind.GENERAL])
    profile, _ = EvaluationProfile.objects.get_or_create(task_kind=task_kind, defaults={"evaluators": defaults})
    return profile
