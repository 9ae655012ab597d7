"""Issue 22, point 3: a reviewer's regex can freeze a worker.

A strategy condition ``^(a+)+$`` and a 28-character task held a worker process, heartbeat
included, for 12.5 s; each more character doubled it. Every pattern a person or a model writes now
runs on RE2 (feedback/saferegex.py), and one RE2 cannot run is refused where it is saved.

No timing is asserted: each match runs under a deadline of ``DEADLINE`` seconds, generous for
any engine that reads the text once, and the texts are long enough (48 characters and more) that
a backtracking engine needs hours on them. Past the deadline the match is interrupted (Python's
``re`` checks for signals as it backtracks) and the test fails.
"""

import contextlib
import json
import logging
import signal
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
from django.urls import reverse
from django.utils.html import escape

from feedback import roles, saferegex
from feedback.agent import invoker
from feedback.agent.guardrails import Guardrails
from feedback.agent.llm import LLMReply
from feedback.agent.loop import execute_run
from feedback.agent.tools import Tool, ToolError
from feedback.evaluation.evaluators import EvaluatorError, rule_evaluator
from feedback.evaluation.reference import reference_evaluator
from feedback.evaluation.validation import validate
from feedback.models import (
    AppliedStrategy,
    EvaluationProfile,
    McpServer,
    McpToolOverride,
    Run,
    Strategy,
    StrategyVersion,
    Task,
    ToolSetting,
)
from feedback.strategies import injection
from feedback.strategies.conditions import matches

from .conftest import make_user
from .factories import make_finished_run, make_run

DEADLINE = 10
CATASTROPHIC = "^(a+)+$"
# Python's re needs about 2**48 steps to find that this does not match CATASTROPHIC.
LONG = "a" * 48 + "!"
LOOKAHEAD = r"report(?=\.txt)"


@contextlib.contextmanager
def deadline(seconds: float = DEADLINE) -> Iterator[None]:
    """Interrupt what runs inside after ``seconds``: a match that takes hours fails the test."""

    def expired(signum, frame):
        raise TimeoutError(f"still matching after {seconds} s: a backtracking engine")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _strategy(condition: dict, *, guidance: str = "Use exact paths.", status: str = "active") -> Strategy:
    strategy = Strategy.objects.create(title="A lesson", pattern_kind="task_keywords", status=status)
    # Stored as it is, as an older version of the code (or a hand-made row) would have stored it.
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title="A lesson", pattern="p", new_guidance=guidance, condition=condition
    )
    strategy.save()
    return strategy


# --- matching is linear ------------------------------------------------------------------------
def test_a_catastrophic_condition_against_a_long_task_returns_promptly():
    with deadline():
        assert matches({"regex": CATASTROPHIC}, task_kind="general", text=LONG) is False
        assert matches({"regex": CATASTROPHIC}, task_kind="general", text="A" * 5000) is True  # case-insensitive


@pytest.mark.django_db
def test_a_worker_picks_a_runs_strategies_promptly_whatever_a_condition_says():
    """The real path: the worker's run loop selects the strategies (injection.select) and records
    the ones it applied. The catastrophic one does not match; the ordinary one does."""
    slow = _strategy({"regex": CATASTROPHIC}, guidance="Never shown.")
    fine = _strategy({"regex": r"a{40}"}, guidance="Count the letters.")
    run = make_run(text=LONG, kind=Task.Kind.GENERAL)

    class Answers:
        backend, name = "test", "scripted"

        def complete(self, messages, tools):
            return LLMReply(content="Done.")

    with deadline():
        execute_run(run.pk, model=Answers())
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    applied = set(AppliedStrategy.objects.filter(run=run).values_list("strategy_version__strategy", flat=True))
    assert applied == {fine.pk} and slow.pk not in applied
    assert "Count the letters." in run.system_prompt and "Never shown." not in run.system_prompt


def test_a_guardrail_pattern_refuses_a_long_argument_promptly(tmp_path):
    rules = Guardrails([{"type": "parameter_rule", "tool": "t", "param": "x", "pattern": CATASTROPHIC}], tmp_path)
    with deadline():
        decision = rules.check("t", json.dumps({"x": LONG}), set())
    assert decision.refusal.startswith("Guardrail: x='aaaa") and CATASTROPHIC in decision.refusal


def test_a_layer_one_regex_rule_checks_a_long_result_promptly():
    with deadline():
        report = validate([{"type": "regex", "path": "name", "pattern": CATASTROPHIC}], {"name": LONG})
    assert report.status == "fail" and report.checks[0]["message"] == f"name does not match {CATASTROPHIC}"


def test_json_schema_patterns_of_a_tools_parameters_check_long_arguments_promptly():
    """An MCP server's schema is outside input, the arguments are the model's: jsonschema's own
    pattern and patternProperties would run Python's re on them."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": CATASTROPHIC}},
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }
    tool = Tool(name="t", description="test tool", parameters=schema, func=lambda ctx, **kw: kw)
    with deadline():
        with pytest.raises(ToolError, match="does not match"):
            invoker.parse_arguments(json.dumps({"name": LONG}), tool)
        with pytest.raises(ToolError, match="Additional properties are not allowed"):
            invoker.parse_arguments(json.dumps({LONG: 1}), tool)
        assert invoker.parse_arguments(json.dumps({"a" * 60: 3}), tool) == {"a" * 60: 3}
        report = validate([{"type": "json_schema", "schema": schema}], {"name": LONG})
    assert report.status == "fail"


@pytest.mark.django_db
def test_the_evaluators_patterns_read_a_long_answer_promptly():
    run = make_finished_run(output=LONG, expected_answer=f"/{CATASTROPHIC}/")
    with deadline():
        rule = rule_evaluator(run, {"format_regex": CATASTROPHIC})
        reference = reference_evaluator(run, {})
    assert rule.details["checks"] == [{"check": "format_regex", "ok": False, "message": f"matches {CATASTROPHIC}"}]
    assert reference.score == 0.0 and reference.feedback == f"The answer does not match /{CATASTROPHIC}/."


# --- patterns RE2 cannot run ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (LOOKAHEAD, "lookahead"),
        (r"(?<!not )urgent", "lookbehind"),
        (r"(\w+) \1", "a backreference"),
        ("x" * 1001, "longer than 1000 characters"),
    ],
)
def test_a_pattern_re2_cannot_run_is_named_with_the_reason(pattern, why):
    message = saferegex.problem(pattern)
    assert message.startswith(f"The regular expression {pattern[:80]!r}"[:-1]) and why in message


@pytest.fixture
def proposed(db):
    return _strategy({"task_kinds": ["file_analysis"]}, status="proposed")


def _edit(**fields) -> dict:
    data = {"title": "A lesson", "pattern": "p", "new_guidance": "Use exact paths.", "condition": "{}",
            "guardrails": "[]", "reason": "sharper"}  # fmt: skip
    return {**data, **fields}


def test_the_edit_form_refuses_a_condition_re2_cannot_run_and_keeps_what_was_typed(client, reviewer, proposed):
    client.force_login(reviewer)
    typed = json.dumps({"regex": LOOKAHEAD})
    response = client.post(reverse("feedback-strategy-edit", args=[proposed.pk]), _edit(condition=typed))
    html = response.content.decode()
    assert response.status_code == 400
    assert "The regular expression &#x27;report(?=\\\\.txt)&#x27; cannot be used: lookahead" in html
    assert escape(typed) in html  # what was typed is still in the form
    assert proposed.versions.count() == 1


def test_the_edit_form_refuses_a_guardrail_pattern_re2_cannot_run(client, reviewer, proposed):
    client.force_login(reviewer)
    rule = [{"type": "parameter_rule", "tool": "read_text_file", "param": "path", "pattern": r"(\w)\1"}]
    response = client.post(reverse("feedback-strategy-edit", args=[proposed.pk]), _edit(guardrails=json.dumps(rule)))
    assert response.status_code == 400
    assert "Guardrail 1: &#x27;pattern&#x27;: The regular expression" in response.content.decode()
    assert "a backreference" in response.content.decode()
    assert proposed.versions.count() == 1


def test_the_edit_service_refuses_a_pattern_re2_cannot_run(reviewer, proposed):
    from django.core.exceptions import ValidationError

    from feedback.strategies import services

    with pytest.raises(ValidationError) as refused:
        services.strategy_edit(strategy=proposed, editor=reviewer, condition={"regex": LOOKAHEAD})
    assert "cannot be used: lookahead" in str(refused.value)
    assert proposed.versions.count() == 1


# --- the admin -----------------------------------------------------------------------------------
class _Form(HTMLParser):
    """The fields of a page's form as a browser would send them (the admin's change form)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.data.setdefault(name, []).append(a.get("value") or ("on" if a.get("type") == "checkbox" else ""))
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = [""]
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in a:
            self.data.setdefault(self._select, []).append(a.get("value", ""))

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea][0] += data.removeprefix("\n") if not self.data[self._textarea][0] else data


def admin_save(client, url: str, **changes: str):
    """Post the admin's form at ``url`` back as shown, with ``changes``."""
    page = client.get(url)
    assert page.status_code == 200
    form = _Form()
    form.feed(page.content.decode())
    data = {**form.data, **{k: [v] for k, v in changes.items()}}
    return client.post(url, data)


@pytest.fixture
def superuser(db):
    return make_user("admin", roles.REVIEWER, is_staff=True, is_superuser=True)


def test_the_admin_refuses_patterns_re2_cannot_run(client, superuser, proposed):
    client.force_login(superuser)
    version = proposed.current_version
    url = reverse("admin:feedback_strategy_change", args=[proposed.pk])
    response = admin_save(client, url, **{"versions-0-condition": json.dumps({"regex": LOOKAHEAD})})
    assert response.status_code == 200  # the form again, with its errors
    assert "cannot be used: lookahead" in response.content.decode()
    version.refresh_from_db()
    assert version.condition == {"task_kinds": ["file_analysis"]}

    profile = EvaluationProfile.objects.create(
        task_kind="general", evaluators=[{"evaluator": "rule", "weight": 1, "config": {}}]
    )
    bad = [{"evaluator": "rule", "weight": 1, "config": {"format_regex": r"(\d)\1"}}]
    url = reverse("admin:feedback_evaluationprofile_change", args=[profile.pk])
    response = admin_save(client, url, evaluators=json.dumps(bad))
    assert "Entry 1: format_regex: The regular expression" in response.content.decode()
    profile.refresh_from_db()
    assert profile.evaluators[0]["config"] == {}

    setting = ToolSetting.objects.create(name="a_tool")
    rules = {"result_rules": [{"type": "json_schema", "schema": {"type": "string", "pattern": LOOKAHEAD}}]}
    response = admin_save(client, reverse("admin:feedback_toolsetting_change", args=[setting.pk]),
                          config=json.dumps(rules))  # fmt: skip
    assert "Rule 1: The regular expression" in response.content.decode()
    setting.refresh_from_db()
    assert setting.config == {}


def test_an_mcp_tool_override_refuses_a_rule_re2_cannot_run(db):
    from django.core.exceptions import ValidationError

    server = McpServer.objects.create(name="team", command="server")
    override = McpToolOverride(server=server, tool="lookup", result_rules=[{"type": "regex", "pattern": LOOKAHEAD}])
    with pytest.raises(ValidationError) as refused:
        override.full_clean()
    assert "Rule 1: The regular expression" in str(refused.value.message_dict["result_rules"])


# --- stored before the checks ------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_stored_condition_re2_cannot_run_matches_nothing_and_says_so_once(caplog, client, reviewer):
    saferegex.stored.cache_clear()
    stored = _strategy({"regex": r"(?<!not )urgent"})
    applied = _strategy({"keywords": ["urgent"]})
    with caplog.at_level(logging.WARNING, logger="feedback.saferegex"):
        for _ in range(3):
            run = make_run(text="An urgent email", kind=Task.Kind.EMAIL_TRIAGE)
            chosen = injection.select(run)
            assert [v.strategy_id for v, _arm in chosen.applied] == [applied.pk]
    warnings = [r.getMessage() for r in caplog.records if r.name == "feedback.saferegex"]
    assert warnings == [
        "A strategy condition: The regular expression '(?<!not )urgent' cannot be used: lookbehind ((?<=…), "
        "(?<!…)) needs backtracking. It matches nothing."
    ]
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[stored.pk])).content.decode()
    assert 'id="unusable"' in html and "(?&lt;!not )urgent" in html and "matches no task" in html


def test_a_stored_guardrail_pattern_re2_cannot_run_is_not_applied_and_the_step_says_so(tmp_path):
    rules = Guardrails([{"type": "parameter_rule", "tool": "t", "param": "x", "pattern": LOOKAHEAD}], tmp_path)
    decision = rules.check("t", json.dumps({"x": "report"}), set())
    assert decision.refusal == ""
    assert decision.notes == [f"Guardrail: the rule {LOOKAHEAD!r} for x cannot be used; not applied."]


@pytest.mark.django_db
def test_an_expected_answer_re2_cannot_run_fails_its_evaluator_with_the_reason():
    run = make_finished_run(output="the report.txt", expected_answer=f"/{LOOKAHEAD}/")
    with pytest.raises(EvaluatorError, match=r"cannot be used as a pattern: .*lookahead"):
        reference_evaluator(run, {})


def test_a_tool_schema_pattern_re2_cannot_run_refuses_the_call_with_the_reason():
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": LOOKAHEAD}}}
    tool = Tool(name="t", description="test tool", parameters=schema, func=lambda ctx, **kw: kw)
    with pytest.raises(ToolError, match="cannot be used: lookahead"):
        invoker.parse_arguments(json.dumps({"name": "report"}), tool)
