"""Mining's malformed-reply pattern kind: the model replies the loop could not use, the main way
small models fail. A reply that was not valid JSON or had unusable tool_calls (JSON mode), an
empty reply, a call to an unknown tool, or arguments that are not a JSON object or break the
tool's parameters, by failure and reply mode; mine() (mining.py) calls malformed_replies().
"""

from datetime import datetime

from django.conf import settings
from django.db.models import Case, CharField, QuerySet, Value, When

from feedback.models import Run, Step

from .patterns import (
    EVIDENCE_LIMIT,
    Pattern,
    _failing,
    _failing_steps_contrast,
    _grouped_steps,
    _keep,
    _pattern,
    _succeeding,
    _window_steps,
)

# How the agent records them (feedback/agent/loop.py and invoker.py): a reply the loop could not
# use is a model_error step, "MalformedReply" (JSON mode: parse_json_reply's message says what was
# wrong) or "EmptyReply"; a tool call the model wrote wrong is a failed tool_call step,
# "InvalidToolCall" (an unknown tool, or arguments that are not a JSON object or break the
# tool's JSON Schema). "LLMError" (the endpoint could not be reached) is not the model's reply.
MALFORMED, EMPTY, INVALID_CALL = "MalformedReply", "EmptyReply", "InvalidToolCall"

# The failure, from the recorded message (the messages are the runtime's own, in English).
REPLY_FAILURE = Case(
    When(error_class=EMPTY, then=Value("empty_reply")),
    When(error_class=MALFORMED, error__startswith="Your reply", then=Value("invalid_json")),
    When(error_class=MALFORMED, then=Value("bad_tool_calls")),
    When(error_class=INVALID_CALL, error__startswith="Unknown tool", then=Value("unknown_tool")),
    When(error_class=INVALID_CALL, error__startswith="The arguments", then=Value("malformed_arguments")),
    When(error_class=INVALID_CALL, error__startswith="Invalid arguments for", then=Value("invalid_arguments")),
    # Anything else ("the parameters' schema cannot be used", an MCP server's) is not the model's.
    default=Value(""),
    output_field=CharField(),
)
# The reply mode, as far as the step shows it: a MalformedReply only exists in JSON mode, and
# JSON mode names its calls "json-<turn>-<i>" (llm.parse_json_reply). An empty text in JSON mode
# is invalid JSON, so an EmptyReply is native (or, rarely, a JSON reply with an empty answer).
REPLY_MODE = Case(
    When(error_class=MALFORMED, then=Value("json")),
    When(tool_call_id__startswith="json-", then=Value("json")),
    default=Value("native"),
    output_field=CharField(),
)


def reply_failure(*, error_class: str, error: str, tool_call_id: str = "") -> tuple[str, str] | None:
    """(failure, mode) of one step, as REPLY_FAILURE and REPLY_MODE say in SQL; None when the
    step is not a malformed or empty reply. For the review page, which reads a few steps."""
    if error_class == EMPTY:
        failure = "empty_reply"
    elif error_class == MALFORMED:
        failure = "invalid_json" if error.startswith("Your reply") else "bad_tool_calls"
    elif error_class == INVALID_CALL and error.startswith("Unknown tool"):
        failure = "unknown_tool"
    elif error_class == INVALID_CALL and error.startswith("The arguments"):
        failure = "malformed_arguments"
    elif error_class == INVALID_CALL and error.startswith("Invalid arguments for"):
        failure = "invalid_arguments"
    else:
        return None
    mode = "json" if error_class == MALFORMED or tool_call_id.startswith("json-") else "native"
    return failure, mode


def _reply_steps(since: datetime) -> QuerySet[Step]:
    # From the step_mining_replies index: the few steps of these error classes.
    return (
        _grouped_steps(since)
        .filter(kind__in=[Step.Kind.MODEL_ERROR, Step.Kind.TOOL_CALL], error_class__in=[MALFORMED, EMPTY, INVALID_CALL])
        .annotate(failure=REPLY_FAILURE, mode=REPLY_MODE)
        .exclude(failure="")
    )


def malformed_replies(since, totals) -> list[Pattern]:
    rows = (
        _reply_steps(since)
        .values("failure", "mode", "run__task_kind")
        .annotate(**_failing_steps_contrast())
        .filter(failing__gte=settings.STRATEGY_MIN_SUPPORT)
    )
    patterns = []
    for row in rows:
        kind, failure, mode = row["run__task_kind"], row["failure"], row["mode"]
        pattern = _pattern(
            "malformed_reply",
            f"malformed_reply:{kind}:{failure}:{mode}",
            kind,
            row["failing"],
            row["succeeding"],
            totals,
            {"failure": failure, "mode": mode, "example_error": row["example"]},
        )
        if not _keep(pattern):
            continue
        pattern.evidence = list(
            _reply_steps(since)
            .filter(run__task_kind=kind, failure=failure, mode=mode)
            .filter(_failing("run__"))
            .values_list("run_id", flat=True)
            .distinct()
            .order_by("run_id")[:EVIDENCE_LIMIT]
        )
        pattern.details.update(remedy_facts(since, kind, pattern.evidence))
        patterns.append(pattern)
    return patterns


def remedy_facts(since: datetime, kind: str, evidence: list[int]) -> dict:
    """What the remedies need to know, from the window: the tools the succeeding runs of the kind
    used and the evidence runs were offered (offer_facts: a smaller offer), and whether native tool
    calls worked with the evidence runs' models (a switch to native mode is safe only then)."""
    offered, models = _offered(evidence)
    native = (
        _window_steps(since)
        .filter(kind=Step.Kind.TOOL_CALL, run__model_name__in=models - {""}, run__llm_backend="openai")
        .exclude(error_class=INVALID_CALL)
        .exclude(tool_call_id__startswith="json-")
        .exclude(tool_call_id="")
        .exists()
    )
    used = tools_used(since, kind)
    return {"tools_used_by_successes": used, "tools_offered": sorted(offered), "native_tool_calls_work": native}


def offer_facts(used: list[str], evidence: list[int]) -> dict:
    """The facts a smaller offer (proposals._fewer_tools) is decided on: ``used``, the tools the
    succeeding runs of the kind used (tools_used), and the tools the evidence runs were offered."""
    return {"tools_used_by_successes": used, "tools_offered": sorted(_offered(evidence)[0])}


def tools_used(since: datetime, kind: str) -> list[str]:
    """The tools the window's succeeding runs of ``kind`` called successfully."""
    return sorted(
        set(
            _window_steps(since)
            .filter(run__task_kind=kind, kind=Step.Kind.TOOL_CALL, success=True)
            .filter(_succeeding("run__"))
            .values_list("tool_name", flat=True)
            .distinct()[:50]
        )
    )


def _offered(evidence: list[int]) -> tuple[set[str], set[str]]:
    """The tools the evidence runs were offered, and their models."""
    offered: set[str] = set()
    models: set[str] = set()
    for tools, model in Run.objects.filter(pk__in=evidence).values_list("tools_offered", "model_name"):
        offered |= {t for t in tools or [] if isinstance(t, str)}
        models.add(model)
    return offered, models
