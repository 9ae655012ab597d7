"""Turning mined patterns into proposed strategies, with their evidence.

A pattern already known (same pattern key) is merged into its strategy: the new evidence runs
are added and its support rises, as ExpeL keeps a counter per insight, instead of repeating the
proposal. Guidance is written by the LLM from the evidence when an endpoint is configured, from
templates otherwise; guardrails come from rules, so they never depend on a model's whim.

Titles and guidance generalise (generalise.py): they are written from the pattern's kind (the
tool, the error class, the kind of evaluator feedback, the kind of malformed reply), never pasted
from an evaluator's text, and whatever writes them, template or model, they are checked against
the evidence runs' expected answers, the numbers in those and the file names the runs used. A
model's proposal that quotes any of them is refused for the template.
"""

import json
import logging

from django.conf import settings
from django.db import transaction

from feedback.agent.guardrails import ALWAYS_OFFERED, check_guardrails
from feedback.agent.llm import openai_client, use_endpoint
from feedback.models import Run, Strategy, StrategyEvent, StrategyVersion
from feedback.storable import unstorable

from .conditions import check_condition
from .examples import evidence_model, worked_example
from .generalise import Secrets, generalise, leaks, redact, secrets
from .identity import one_per_pattern
from .mining import mine
from .patterns import Pattern
from .services import strategy_approve
from .wording import _REPLY_FAILURES, error_advice, feedback_category

logger = logging.getLogger(__name__)
_DISCOVERY_TOOLS = {"list_directory"}
# (title, pattern text, old behaviour, new guidance)
type Proposal = tuple[str, str, str, str]


def _guardrails(pattern: Pattern) -> list[dict]:
    d = pattern.details
    if pattern.kind == "error_signature":
        example = d.get("example_error", "")
        if d.get("tool") == "read_text_file" and "No such file" in example:
            return [{"type": "parameter_rule", "tool": "read_text_file", "param": "path",
                     "action": "resolve_in_workspace"}]  # fmt: skip
        if "is the name of a file in the workspace" in example:
            return [{"type": "parameter_rule", "tool": d["tool"], "param": "text", "action": "file_name_as_path"}]
        if d.get("error_class") == "ToolTimeout":
            return [{"type": "retry_policy", "tool": d["tool"], "timeout": 30, "max_attempts": 4}]
        if d.get("error_class") == "Refused":
            return [{"type": "tool_disabled", "tool": d["tool"]}]
    if pattern.kind == "tool_sequence":
        first, then = d["sequence"]
        # "A, then look around" where A usually failed: look around before A instead.
        if then in _DISCOVERY_TOOLS and d.get("first_call_failed_share", 0) >= 0.5:
            return [{"type": "tool_precondition", "tool": first, "requires": then}]
    if pattern.kind == "malformed_reply":
        return _reply_guardrails(d)
    if pattern.kind == "tool_skipped":
        return [{"type": "answer_precondition", "tool": d["tool"]}, *_fewer_tools(d, d["tool"])]
    if pattern.kind == "tool_result_unused":
        return [{"type": "answer_precondition", "tool": d["tool"], "use_result": True}, *_fewer_tools(d, d["tool"])]
    return []


def _fewer_tools(d: dict, needed: str | None = None) -> list[dict]:
    """Only the tools the succeeding runs of the kind used (besides the plan, and ``needed``, the
    tool another rule of the strategy asks for), when that is fewer than the failing runs were
    offered. A shorter catalogue leaves a small model fewer names to invent, less to get wrong in a
    JSON reply (JSON mode puts every tool's schema into the prompt), and fewer tools to mix up: on
    arithmetic, offered analyze_text and http_get beside it, the local model gave the calculator a
    sum without its brackets, and offered the calculator alone it did not."""
    offered = set(d.get("tools_offered") or [])
    used = (set(d.get("tools_used_by_successes") or []) - ALWAYS_OFFERED) & offered
    if needed:
        used.add(needed)
    fewer = bool(used) and (used | ALWAYS_OFFERED) & offered < offered
    return [{"type": "tool_subset", "tools": sorted(used)}] if fewer else []


def _reply_guardrails(d: dict) -> list[dict]:
    """The engine's remedies for malformed or empty replies, where the evidence supports them."""
    failure, mode, rules = d["failure"], d["mode"], []
    if failure in {"unknown_tool", "invalid_json", "bad_tool_calls", "empty_reply"}:
        rules += _fewer_tools(d)
    # JSON replies that fail: native tool calls, but only where they are known to work with the
    # evidence's models (a server without tool support can answer a request with tools by a
    # retryable 500 that the JSON fallback never sees).
    if mode == "json" and failure in {"invalid_json", "bad_tool_calls"} and d.get("native_tool_calls_work"):
        rules.append({"type": "tool_mode", "mode": "native"})
    # Native replies that come back empty (often a tool call the server could not parse) or with
    # arguments that are not JSON: JSON mode, which every chat endpoint can answer, and in which
    # the whole reply, arguments included, is one object the runtime parses itself.
    if mode == "native" and failure in {"empty_reply", "malformed_arguments"}:
        rules.append({"type": "tool_mode", "mode": "json"})
    return rules


def _template(pattern: Pattern, found: Secrets) -> Proposal:
    """(title, pattern text, old behaviour, new guidance) without a model, from the pattern's
    kind; the only evidence text it quotes is an error message, generalised."""
    d, kind = pattern.details, pattern.task_kind.replace("_", " ")
    share = f"{pattern.failing_with} of {pattern.failing_total} failing {kind} runs"
    contrast = f"{pattern.succeeding_with} of {pattern.succeeding_total} succeeding ones"
    if pattern.kind == "error_signature":
        error = generalise(d["example_error"], found)
        title, advice = error_advice(d["tool"], d["error_class"], d["example_error"])
        return (
            title.format(tool=d["tool"], kind=kind),
            f"{d['tool']} failed with {d['error_class']} ('{error[:160]}') in {share}, against {contrast}.",
            f"Calls {d['tool']} in a way that fails with: {error[:200]}",
            f"{advice.format(tool=d['tool'], kind=kind)} The failure it avoids: {error[:200].rstrip('.')}.",
        )
    if pattern.kind == "tool_sequence":
        first, then = d["sequence"]
        return (
            f"Call {then} before {first} in {kind} tasks",
            f"The call sequence {first} → {then} appears in {share} and in {contrast}.",
            f"Calls {first} first and only then {then}.",
            f"In {kind} tasks, call {then} before {first}, and use what it shows to choose {first}'s arguments.",
        )
    if pattern.kind == "evaluator_feedback":
        _, _, summary, old, guidance = feedback_category(d.get("evaluator_kind", ""), d["feedback"])
        return (
            f"Evaluator {d['evaluator']}: {summary} in {kind} tasks",
            f"The {d['evaluator']} evaluator scored {share} low ({summary}), against {contrast}.",
            old,
            guidance.format(kind=kind),
        )
    if pattern.kind == "tool_skipped":
        tool, called = d["tool"], round(100 * d["called_by_successes"])
        return (
            f"Call {tool} before answering {kind} tasks",
            f"{share} did without a successful {tool} call, against {contrast}; {called}% of the "
            f"succeeding {kind} runs called it.",
            f"Answers without calling {tool}, from its own reckoning.",
            f"In {kind} tasks, call {tool} first and answer with what it returns, not with your own reckoning.",
        )
    if pattern.kind == "tool_result_unused":
        tool, stated = d["tool"], round(100 * d["stated_by_successes"])
        return (
            f"Answer {kind} tasks with {tool}'s result",
            f"{share} called {tool} and answered without what it returned, against {contrast}; {stated}% of "
            f"the succeeding {kind} runs that called it answered with its result.",
            f"Calls {tool}, then answers with its own working instead of {tool}'s result.",
            f"In {kind} tasks, answer with the result {tool} returned, not with the expression or figures you gave it.",
        )
    if pattern.kind == "malformed_reply":
        title, old, guidance = _REPLY_FAILURES[d["failure"]]
        mode = "JSON replies" if d["mode"] == "json" else "native tool calls"
        return (
            title.format(kind=kind),
            f"{old} In {share} ({mode}), against {contrast}.",
            old,
            guidance.format(kind=kind),
        )
    words = [w for w in d["keywords"] if not leaks(w, found)]
    quoted = " / ".join(f"'{w}'" for w in words)
    return (
        f"{kind.capitalize()} tasks mentioning {quoted}" if words else f"{kind.capitalize()} tasks of one wording",
        f"Tasks mentioning {' / '.join(d['keywords'])} fail in {share}, against {contrast}.",
        "Treats these tasks like any other.",
        # The condition picks the tasks by their words: the guidance need not repeat them.
        "Tasks like this one have often failed: look at the workspace first and check each tool result "
        "before relying on it.",
    )


def _evidence_for_model(pattern: Pattern, found: Secrets) -> dict:
    """The contrast the model is shown, with what must not reach a proposal generalised away."""
    shown = {}
    for key, value in pattern.contrast().items():
        if key in ("window_days", "since"):
            continue
        if isinstance(value, str):
            value = generalise(value, found)
        elif isinstance(value, list):
            value = [redact(v, found) if isinstance(v, str) else v for v in value]
        shown[key] = value
    return shown


def _written_by_model(pattern: Pattern, fallback: Proposal, found: Secrets) -> Proposal:
    """Ask the configured LLM for a title and guidance; keep the template on any failure, and
    when what it wrote quotes the evidence (an expected answer, a number from one, a file name)."""
    if not use_endpoint() or settings.STRATEGY_PROPOSAL_WRITER == "template":
        return fallback
    client = openai_client(max_retries=1)
    prompt = (
        "An LLM agent keeps failing in the same way. Evidence (JSON): "
        f"{json.dumps(_evidence_for_model(pattern, found))}. Write one short, imperative instruction that "
        "would prevent it in every task of this kind. It is shown to the agent in later tasks with other "
        "answers and other files: never quote an expected answer, a number or a file name. "
        'As JSON: {"title": "...", "guidance": "..."}'
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
        if unstorable([title, guidance]):
            raise ValueError("it holds a NUL character or a lone surrogate, which cannot be stored")
        leaked = leaks(title, found) + leaks(guidance, found)
        if leaked:
            raise ValueError(f"it quotes the evidence ({len(leaked)} item(s))")
    except Exception as exc:  # any failure of the model: the template is a fine proposal
        logger.warning("the model could not write the guidance, using the template: %s", exc)
        return fallback
    return title, fallback[1], fallback[2], guidance


def propose(patterns: list[Pattern]) -> list[Strategy]:
    """Create or merge one strategy per pattern (identity.py says which patterns are one);
    returns those created or whose support rose."""
    touched = []
    for pattern in one_per_pattern(patterns):
        known, strategy = _merge(pattern)
        if not known:
            strategy = _create(pattern)
        if strategy is not None:
            touched.append(strategy)
    return touched


_DECIDED_AGAINST = (Strategy.Status.REJECTED, Strategy.Status.ROLLED_BACK)


def _known(pattern: Pattern):
    """The strategy this pattern already is: by its identity, or, for a proposal made before
    that identity (keyed by one signature or one evaluator), by the miner's keys it was grouped
    from, or by the same kind and template title for the same task kind."""
    strategies = Strategy.objects.select_for_update().order_by("pk")
    strategy = strategies.filter(pattern_key=pattern.key[:200]).first()
    if strategy is None and pattern.mined_keys:
        strategy = strategies.filter(pattern_key__in=pattern.mined_keys).first()
    if strategy is None and pattern.kind != "task_keywords":
        title = _template(pattern, Secrets())[0][:200]
        strategy = strategies.filter(
            pattern_kind=pattern.kind, title=title, evidence_summary__task_kind=pattern.task_kind
        ).first()
    return strategy


def _merge(pattern: Pattern) -> tuple[bool, Strategy | None]:
    """(whether the pattern is already a strategy, that strategy if its support or its
    recurrence rose)."""
    with transaction.atomic():
        strategy = _known(pattern)
        if strategy is None:
            return False, None
        known = set(strategy.evidence.values_list("pk", flat=True))
        new = [pk for pk in pattern.evidence if pk not in known]
        if strategy.status in _DECIDED_AGAINST:
            return True, _recurred(strategy, pattern, new)
        if not new:
            return True, None
        strategy.evidence.add(*new)
        strategy.support += len(new)
        strategy.confidence = pattern.confidence
        strategy.evidence_summary = _summary(pattern)
        strategy.save(update_fields=["support", "confidence", "evidence_summary", "updated_at"])
        StrategyEvent.objects.create(
            strategy=strategy, version=strategy.current_version, action=StrategyEvent.Action.MERGE,
            from_status=strategy.status, to_status=strategy.status,
            reason=f"Mined again {pattern.window_text()}: {len(new)} new failing run(s); "
            f"support now {strategy.support}.",
            snapshot=_summary(pattern),
        )  # fmt: skip
    return True, strategy


def _recurred(strategy: Strategy, pattern: Pattern, new: list[int]) -> Strategy | None:
    """A rejected or rolled-back proposal seen again: its support, evidence and status stay (a
    decision is not silently undone); the failing runs since the decision (or since it was last
    seen again) are counted for reviewers."""
    decided = (
        strategy.events.filter(to_status=strategy.status)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    since = max(filter(None, [decided, strategy.recurred_at]), default=None)
    runs = Run.objects.filter(pk__in=new)
    if since is not None:
        runs = runs.filter(created_at__gt=since)
    latest = runs.order_by("-created_at").values_list("created_at", flat=True)
    count = runs.count()
    if not count:
        return None
    strategy.recurrences += count
    strategy.recurred_at = latest.first()
    strategy.save(update_fields=["recurrences", "recurred_at", "updated_at"])
    StrategyEvent.objects.create(
        strategy=strategy,
        version=strategy.current_version,
        action=StrategyEvent.Action.MERGE,
        from_status=strategy.status,
        to_status=strategy.status,
        reason=f"Seen again {pattern.window_text()}: {count} new failing run(s) since it was "
        f"{strategy.get_status_display().lower()}; support and status unchanged.",
        snapshot=_summary(pattern),
    )
    return strategy


def _summary(pattern: Pattern) -> dict:
    return {**pattern.contrast(), "task_kind": pattern.task_kind}


def _create(pattern: Pattern) -> Strategy | None:
    found = secrets(pattern.evidence)
    title, pattern_text, old, guidance = _written_by_model(pattern, _template(pattern, found), found)
    # The templates quote nothing of the evidence but a generalised error; this holds them to it.
    title, guidance = redact(title, found), redact(guidance, found)
    condition = {"task_kinds": [pattern.task_kind]}
    if pattern.kind == "task_keywords":
        condition["keywords"] = pattern.details["keywords"]
    guardrails = _guardrails(pattern)
    # A condition or guardrail that cannot be used (a regex RE2 cannot run) is never stored.
    problems = check_condition(condition) + check_guardrails(guardrails)
    if problems:
        logger.error("mined an invalid strategy for %s; skipped: %s", pattern.key, " ".join(problems))
        return None
    with transaction.atomic():
        strategy = Strategy.objects.create(
            title=title[:200], pattern_kind=pattern.kind, pattern_key=pattern.key[:200],
            support=len(pattern.evidence), confidence=pattern.confidence,
            evidence_summary=_summary(pattern), trial_fraction=settings.STRATEGY_TRIAL_FRACTION,
        )  # fmt: skip
        version = StrategyVersion.objects.create(
            strategy=strategy, number=1, title=title[:200], pattern=pattern_text, old_behaviour=old,
            new_guidance=guidance,
            condition=condition, guardrails=guardrails,
            worked_example=worked_example(
                pattern.task_kind, pattern.details.get("tool", ""), model_name=evidence_model(pattern.evidence)
            ),
        )  # fmt: skip
        strategy.current_version = version
        strategy.save(update_fields=["current_version"])
        strategy.evidence.add(*pattern.evidence)
        StrategyEvent.objects.create(
            strategy=strategy, version=version, action=StrategyEvent.Action.PROPOSE,
            to_status=Strategy.Status.PROPOSED, reason=f"Mined from recurring failures {pattern.window_text()}.",
            snapshot={**version.snapshot(), "evidence": _summary(pattern)},
        )  # fmt: skip
    if (
        settings.STRATEGY_AUTONOMY
        and strategy.support >= settings.STRATEGY_AUTONOMY_MIN_SUPPORT
        and strategy.confidence is not None
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
