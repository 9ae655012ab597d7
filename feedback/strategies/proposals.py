"""Turning mined patterns into proposed strategies, with their evidence.

A pattern already known (same pattern key) is merged into its strategy: the new evidence runs
are added and its support rises, as ExpeL keeps a counter per insight, instead of repeating the
proposal. Guidance is written by the LLM from the evidence when an endpoint is configured, from
templates otherwise; guardrails come from rules, so they never depend on a model's whim.
"""

import json
import logging

from django.conf import settings
from django.db import transaction

from feedback.agent.errors import normalise_message
from feedback.agent.guardrails import check_guardrails
from feedback.agent.llm import use_endpoint
from feedback.models import Run, Step, Strategy, StrategyEvent, StrategyVersion

from .conditions import check_condition
from .mining import Pattern, mine
from .services import strategy_approve

logger = logging.getLogger(__name__)
_DISCOVERY_TOOLS = {"list_directory"}


def _guardrails(pattern: Pattern) -> list[dict]:
    d = pattern.details
    if pattern.kind == "error_signature":
        example = d.get("example_error", "")
        if d.get("tool") == "read_text_file" and "No such file" in example:
            return [{"type": "parameter_rule", "tool": "read_text_file", "param": "path",
                     "action": "resolve_in_workspace"}]  # fmt: skip
        if d.get("error_class") == "ToolTimeout":
            return [{"type": "retry_policy", "tool": d["tool"], "timeout": 30, "max_attempts": 4}]
        if d.get("error_class") == "Refused":
            return [{"type": "tool_disabled", "tool": d["tool"]}]
    if pattern.kind == "tool_sequence":
        first, then = d["sequence"]
        # "A, then look around" where A usually failed: look around before A instead.
        if then in _DISCOVERY_TOOLS and d.get("first_call_failed_share", 0) >= 0.5:
            return [{"type": "tool_precondition", "tool": first, "requires": then}]
    return []


def _template(pattern: Pattern) -> tuple[str, str, str, str]:
    """(title, pattern text, old behaviour, new guidance) without a model."""
    d, kind = pattern.details, pattern.task_kind.replace("_", " ")
    share = f"{pattern.failing_with} of {pattern.failing_total} failing {kind} runs"
    contrast = f"{pattern.succeeding_with} of {pattern.succeeding_total} succeeding ones"
    if pattern.kind == "error_signature":
        return (
            f"{d['tool']} fails: {normalise_message(d['example_error'])[:80]}",
            f"{d['tool']} failed with {d['error_class']} ('{d['example_error'][:160]}') "
            f"in {share}, against {contrast}.",
            f"Calls {d['tool']} in a way that fails with: {d['example_error'][:200]}",
            f"When calling {d['tool']} in {kind} tasks, avoid this failure: {d['example_error'][:200].rstrip('.')}. "
            "Check the arguments against what earlier observations showed (for file paths: list the "
            "directories, including sub-folders, and use the exact path).",
        )
    if pattern.kind == "tool_sequence":
        first, then = d["sequence"]
        return (
            f"Avoid {first} then {then} in {kind} tasks",
            f"The call sequence {first} → {then} appears in {share} and in {contrast}.",
            f"Calls {first} first and only then {then}.",
            f"In {kind} tasks, call {then} before {first}, and use what it shows to choose {first}'s arguments.",
        )
    if pattern.kind == "evaluator_feedback":
        return (
            f"Evaluator {d['evaluator']}: {d['feedback'][:60]}",
            f"The {d['evaluator']} evaluator said '{d['feedback'][:160]}' on {share}, against {contrast}.",
            f"Answers draw this feedback: {d['feedback'][:200]}",
            f"In {kind} tasks, make sure the final answer addresses: {d['feedback'][:200]}",
        )
    words = " / ".join(f"'{w}'" for w in d["keywords"])
    return (
        f"{kind.capitalize()} tasks mentioning {words}",
        f"Tasks mentioning {words} fail in {share}, against {contrast}.",
        f"Treats tasks mentioning {words} like any other.",
        f"Tasks mentioning {words} often fail: look at the workspace first and check each "
        "tool result before relying on it.",
    )


def _written_by_model(pattern: Pattern, fallback: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    """Ask the configured LLM for a title and guidance; keep the template on any failure."""
    if not use_endpoint():
        return fallback
    import openai

    client = openai.OpenAI(
        base_url=settings.OPENAI_BASE_URL or None, api_key=settings.OPENAI_API_KEY or "not-needed",
        timeout=settings.LLM_TIMEOUT_SECONDS, max_retries=1,
    )  # fmt: skip
    prompt = (
        "An LLM agent keeps failing in the same way. Evidence (JSON): "
        f"{json.dumps(pattern.contrast())}. Write one short, imperative instruction that would "
        'prevent it, as JSON: {"title": "...", "guidance": "..."}'
    )
    try:
        response = client.chat.completions.create(
            model=settings.LLM_MODEL,
            messages=[{"role": "user", "content": prompt}],
            response_format={"type": "json_object"},
        )
        data = json.loads(response.choices[0].message.content or "")
        title, guidance = str(data["title"]).strip()[:200], str(data["guidance"]).strip()[:2000]
        if not title or not guidance:
            raise ValueError("empty title or guidance")
    except Exception as exc:  # any failure of the model: the template is a fine proposal
        logger.warning("the model could not write the guidance, using the template: %s", exc)
        return fallback
    return title, fallback[1], fallback[2], guidance


def worked_example(task_kind: str, tool: str = "") -> str:
    """A successful trajectory of a similar task, shown to the model as an example."""
    runs = Run.objects.filter(
        task_kind=task_kind,
        status=Run.Status.SUCCEEDED,
        outcome=Run.Outcome.ACCOMPLISHED,
        score__gte=settings.STRATEGY_GOOD_SCORE,
    ).exclude(steps__success=False)
    if tool:
        runs = runs.filter(steps__tool_name=tool)
    run = runs.select_related("task").order_by("-score", "-created_at").first()
    if run is None:
        return ""
    lines = [f"Task: {run.task.text[:300]}"]
    for step in run.steps.filter(kind=Step.Kind.TOOL_CALL).exclude(tool_name="update_plan").order_by("index")[:8]:
        lines.append(f"- {step.tool_name}({json.dumps(step.arguments)[:150]}) -> ok")
    lines.append(f"Final answer: {run.final_output[:300]}")
    return "\n".join(lines)


def propose(patterns: list[Pattern]) -> list[Strategy]:
    """Create or merge one strategy per pattern; returns those created or whose support rose."""
    touched = []
    for pattern in patterns:
        known, strategy = _merge(pattern)
        if not known:
            strategy = _create(pattern)
        if strategy is not None:
            touched.append(strategy)
    return touched


def _merge(pattern: Pattern) -> tuple[bool, Strategy | None]:
    """(whether the pattern is already a strategy, that strategy if its support rose)."""
    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().filter(pattern_key=pattern.key[:200]).first()
        if strategy is None:
            return False, None
        known = set(strategy.evidence.values_list("pk", flat=True))
        new = [pk for pk in pattern.evidence if pk not in known]
        if not new:
            return True, None
        strategy.evidence.add(*new)
        strategy.support += len(new)
        strategy.confidence = round(pattern.confidence, 3)
        strategy.evidence_summary = pattern.contrast()
        strategy.save(update_fields=["support", "confidence", "evidence_summary", "updated_at"])
        StrategyEvent.objects.create(
            strategy=strategy, version=strategy.current_version, action=StrategyEvent.Action.MERGE,
            from_status=strategy.status, to_status=strategy.status,
            reason=f"Mined again {pattern.window_text()}: {len(new)} new failing run(s); "
            f"support now {strategy.support}.",
            snapshot=pattern.contrast(),
        )  # fmt: skip
    return True, strategy


def _create(pattern: Pattern) -> Strategy | None:
    title, pattern_text, old, guidance = _written_by_model(pattern, _template(pattern))
    condition = {"task_kinds": [pattern.task_kind]}
    if pattern.kind == "task_keywords":
        condition["keywords"] = pattern.details["keywords"]
    guardrails = _guardrails(pattern)
    if check_condition(condition) or check_guardrails(guardrails):
        logger.error("mined an invalid strategy for %s; skipped", pattern.key)
        return None
    with transaction.atomic():
        strategy = Strategy.objects.create(
            title=title[:200], pattern_kind=pattern.kind, pattern_key=pattern.key[:200],
            support=len(pattern.evidence), confidence=round(pattern.confidence, 3),
            evidence_summary=pattern.contrast(), trial_fraction=settings.STRATEGY_TRIAL_FRACTION,
        )  # fmt: skip
        version = StrategyVersion.objects.create(
            strategy=strategy, number=1, pattern=pattern_text, old_behaviour=old, new_guidance=guidance,
            condition=condition, guardrails=guardrails,
            worked_example=worked_example(pattern.task_kind, pattern.details.get("tool", "")),
        )  # fmt: skip
        strategy.current_version = version
        strategy.save(update_fields=["current_version"])
        strategy.evidence.add(*pattern.evidence)
        StrategyEvent.objects.create(
            strategy=strategy, version=version, action=StrategyEvent.Action.PROPOSE,
            to_status=Strategy.Status.PROPOSED, reason=f"Mined from recurring failures {pattern.window_text()}.",
            snapshot={**version.snapshot(), "evidence": pattern.contrast()},
        )  # fmt: skip
    if (
        settings.STRATEGY_AUTONOMY
        and strategy.support >= settings.STRATEGY_AUTONOMY_MIN_SUPPORT
        and strategy.confidence >= settings.STRATEGY_AUTONOMY_MIN_CONFIDENCE
    ):
        # Opt-in autonomy: to trial without a reviewer, never further.
        strategy = strategy_approve(
            strategy=strategy, reviewer=None,
            reason=f"Autonomy: support {strategy.support} ≥ {settings.STRATEGY_AUTONOMY_MIN_SUPPORT} and "
            f"confidence {strategy.confidence:.2f} ≥ {settings.STRATEGY_AUTONOMY_MIN_CONFIDENCE}.",
        )  # fmt: skip
    return strategy


def mine_and_propose(*, window_days: int | None) -> list[Strategy]:
    """Mine the last ``window_days`` days (None: all history) and propose what was found."""

    return propose(mine(window_days=window_days))
