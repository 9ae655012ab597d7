"""The review page says, for each evidence run, whether the strategy would have fixed it, and how
that was computed: a guardrail acting on its failing call, the guidance's pattern, or out of scope."""

import re

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from feedback.agent.errors import error_signature
from feedback.models import Evaluation, Run, Step, Strategy, StrategyVersion, Task, Workspace

pytestmark = pytest.mark.django_db

NO_SUCH_FILE = "No such file: 'release-notes.txt'. List the directory to see which files exist."


@pytest.fixture
def workspace():
    ws = Workspace.objects.create(name="docs-demo")
    (settings.WORKSPACES_ROOT / "docs-demo" / "docs").mkdir(parents=True)
    (settings.WORKSPACES_ROOT / "docs-demo" / "docs" / "release-notes.txt").write_text("v2: faster.")
    return ws


def strategy_with(*, kind="error_signature", key="", guardrails=(), condition=None, summary=None) -> Strategy:
    strategy = Strategy.objects.create(title="A lesson", pattern_kind=kind, pattern_key=key,
                                       evidence_summary=summary or {})  # fmt: skip
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title="A lesson", pattern="p", new_guidance="g",
        condition={"task_kinds": ["file_analysis"]} if condition is None else condition, guardrails=list(guardrails),
    )  # fmt: skip
    strategy.save()
    return strategy


def evidence_run(strategy, *, kind="file_analysis", workspace=None, steps=(), tools_offered=()):
    """``steps``: (step kind, tool, path or None, error class, error, tool call id)."""
    task = Task.objects.create(text="Summarise release-notes.txt", kind=kind, workspace=workspace)
    run = Run.objects.create(task=task, task_kind=kind, status="succeeded", score=0.2, outcome="not_accomplished",
                             tools_offered=list(tools_offered))  # fmt: skip
    for index, (step_kind, tool, path, error_class, error, call_id) in enumerate(steps):
        Step.objects.create(
            run=run, index=index, kind=step_kind, tool_name=tool, tool_call_id=call_id,
            arguments={"path": path} if path else None, success=not error, error=error, error_class=error_class,
            error_signature=error_signature(tool, error_class, error) if error and tool else "",
        )  # fmt: skip
    strategy.evidence.add(run)
    return run


def missing_file(path="release-notes.txt"):
    return ("tool_call", "read_text_file", path, "ToolError", NO_SUCH_FILE, "call_1")


def evidence_rows(client, reviewer, strategy) -> dict[int, str]:
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    rows = re.findall(r'<li id="evidence-(\d+)">(.*?)</li>', html, re.S)
    return {int(pk): re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for pk, row in rows} | {0: html}


def test_a_path_guardrail_would_have_fixed_the_run_whose_file_is_elsewhere(client, reviewer, workspace):
    resolve = {"type": "parameter_rule", "tool": "read_text_file", "param": "path", "action": "resolve_in_workspace"}
    signature = error_signature("read_text_file", "ToolError", NO_SUCH_FILE)
    s = strategy_with(key=f"error_signature:file_analysis:{signature}", guardrails=[resolve])
    elsewhere = evidence_run(s, workspace=workspace, steps=[missing_file()])
    nowhere = evidence_run(s, workspace=workspace, steps=[missing_file("gone.txt")])
    arithmetic = evidence_run(s, kind="arithmetic", workspace=workspace, steps=[missing_file()])
    rows = evidence_rows(client, reviewer, s)
    assert "A guardrail would have acted" in rows[elsewhere.pk]
    assert (
        "Step 0 (read_text_file), which failed, would have run with other arguments: "
        "Guardrail: path &#x27;release-notes.txt&#x27; resolved to &#x27;docs/release-notes.txt&#x27;."
    ) in rows[elsewhere.pk]
    # The file is nowhere in the workspace: the rule changes nothing; the run shows the error.
    assert "Shows the pattern the guidance addresses" in rows[nowhere.pk] and "Step 0" not in rows[nowhere.pk]
    assert "Out of scope: the condition does not match this task" in rows[arithmetic.pk]
    assert ("Of the 3 runs shown: a guardrail would have acted on 1, 1 show the pattern the guidance addresses, "
            "1 are out of scope.") in rows[0]  # fmt: skip
    assert "whether it would then have succeeded is not known" in rows[0]


def test_a_guardrail_that_refuses_a_call_that_worked_is_no_fix(client, reviewer, workspace):
    precondition = {"type": "tool_precondition", "tool": "read_text_file", "requires": "list_directory"}
    s = strategy_with(
        kind="tool_sequence", key="tool_sequence:file_analysis:read_text_file>list_directory", guardrails=[precondition]
    )
    worked = evidence_run(s, workspace=workspace, steps=[
        ("tool_call", "read_text_file", "docs/release-notes.txt", "", "", "call_1"),
        ("tool_call", "analyze_text", None, "ToolError", "Too short to analyse.", "call_2"),
    ])  # fmt: skip
    listed = ("tool_call", "list_directory", ".", "", "", "call_2")
    failed = evidence_run(s, workspace=workspace, steps=[missing_file(), listed])
    rows = evidence_rows(client, reviewer, s)
    refused = "Step 0 (read_text_file), which had worked, would have been refused: Guardrail: call list_directory"
    assert refused in rows[worked.pk]
    assert "A guardrail would have acted" not in rows[worked.pk]
    assert rows[worked.pk].count("Neither: no guardrail would have acted") == 1
    assert "A guardrail would have acted" in rows[failed.pk]
    assert "Step 0 (read_text_file), which failed, would have been refused" in rows[failed.pk]


def test_a_reply_mode_switch_and_a_smaller_offer_are_shown_for_the_replies_they_change(client, reviewer):
    s = strategy_with(
        kind="malformed_reply", key="malformed_reply:file_analysis:empty_reply:native",
        guardrails=[{"type": "tool_subset", "tools": ["read_text_file"]}, {"type": "tool_mode", "mode": "json"}],
    )  # fmt: skip
    empty = ("model_error", "", None, "EmptyReply", "Your last reply was empty.", "")
    native = evidence_run(s, steps=[empty], tools_offered=["calculator", "read_text_file", "update_plan"])
    rows = evidence_rows(client, reviewer, s)
    assert "A guardrail would have acted" in rows[native.pk]
    assert "It would have been offered 2 of its 3 tools: read_text_file, update_plan." in rows[native.pk]
    assert "Its model would have been asked for JSON replies instead of native tool calls." in rows[native.pk]


def test_guidance_from_evaluator_feedback_addresses_the_runs_with_that_feedback(client, reviewer):
    s = strategy_with(kind="evaluator_feedback", key="evaluator_feedback:file_analysis:judge:Too vague",
                      summary={"evaluator": "judge", "feedback": "Too vague"})  # fmt: skip
    vague = evidence_run(s)
    Evaluation.objects.create(run=vague, evaluator="judge", kind="judge", score=0.1, feedback="Too vague: say more.")
    other = evidence_run(s)
    rows = evidence_rows(client, reviewer, s)
    assert "Shows the pattern the guidance addresses" in rows[vague.pk]
    assert "Neither: no guardrail would have acted, and the run does not show the pattern" in rows[other.pk]


def test_the_verdicts_cost_the_same_queries_for_few_or_many_runs(client, reviewer, workspace):
    resolve = {"type": "parameter_rule", "tool": "read_text_file", "param": "path", "action": "resolve_in_workspace"}
    s = strategy_with(key="error_signature:file_analysis:x", guardrails=[resolve])
    client.force_login(reviewer)
    url = reverse("feedback-strategy-detail", args=[s.pk])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    # N+1 guarded: the strategy page's verdict per evidence run (its steps, the guardrails' replay)
    # is read for all runs at once: the count does not grow from one run to ten.
    evidence_run(s, workspace=workspace, steps=[missing_file()])
    queries()  # the first page of a session reads what later ones find cached
    few = queries()
    for _ in range(9):
        evidence_run(s, workspace=workspace, steps=[missing_file()])
    assert queries() == few


def test_the_verdicts_read_in_simplified_chinese(client, reviewer, workspace):
    resolve = {"type": "parameter_rule", "tool": "read_text_file", "param": "path", "action": "resolve_in_workspace"}
    s = strategy_with(key="error_signature:file_analysis:x", guardrails=[resolve])
    evidence_run(s, workspace=workspace, steps=[missing_file()])
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    html = evidence_rows(client, reviewer, s)[0]
    assert "护栏会起作用" in html and "第 0 步（read_text_file）失败了，它会以其他参数运行" in html
    assert "在显示的 1 个运行中：护栏会对 1 个起作用" in html and "只计算以下内容，不多做推断。" in html
