"""One definition of an error for the metrics and the trials (feedback/metrics/errors.py): a
failed tool call or a model error is one; a guardrail's refusal and a reviewer's refusal of a
confirmation are not, and are counted apart. And only production runs count in the metrics."""

from datetime import date, datetime, timedelta
from datetime import time as dt_time

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import metrics, tasks
from feedback.metrics import Window
from feedback.metrics.daily import days_due
from feedback.models import AppliedStrategy, DailyRunStats, Evaluation, Run, Step
from feedback.strategies.trials import trial_stats

from .api_helpers import call, token_for
from .factories import make_finished_run, make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


def day(n: int) -> date:
    return timezone.localdate() - timedelta(days=n)


def at(n: int, hour: int) -> datetime:
    return timezone.make_aware(datetime.combine(day(n), dt_time(hour)))


def step(run: Run, kind: str = Step.Kind.TOOL_CALL, *, error_class: str = "", signature: str = "", **fields) -> Step:
    failed = bool(error_class)
    return Step.objects.create(
        run=run,
        index=run.steps.count(),
        kind=kind,
        tool_name="read_text_file" if kind == Step.Kind.TOOL_CALL else "",
        success=not failed if kind == Step.Kind.TOOL_CALL else (False if failed else None),
        error_class=error_class,
        error="went wrong" if failed else "",
        error_signature=signature,
        duration_ms=10,
        **fields,
    )


def test_guardrail_refusals_and_human_rejections_are_counted_apart_from_errors(client, operator):
    first = make_finished_run(created_at=at(1, 9))
    step(first, error_class="ToolError", signature="tool-1")
    for _ in range(3):
        step(first, error_class="GuardrailRefused", signature="guard-1")
    step(first, error_class="Refused", signature="person-1")  # a reviewer refused to confirm the call
    step(first, Step.Kind.MODEL_ERROR, error_class="MalformedReply")  # an error, with no signature
    second = make_finished_run(created_at=at(1, 15))
    step(second, error_class="GuardrailRefused", signature="guard-1")  # the same refusal again: still none
    step(second, error_class="ToolError", signature="tool-1")  # the same error again: repeated
    window = Window(since=at(1, 0), until=at(0, 0))
    expected = {
        "errors": 3,
        "repeated": 1,
        "repeated_rate": pytest.approx(1 / 3),
        "guardrail_refusals": 4,
        "human_rejections": 1,
    }
    for read in ("live", "from the daily rows"):
        summary = metrics.repeated_error_summary(window)
        assert {name: summary[name] for name in expected} == expected, read
        tasks.daily_stats_refresh_task()
    assert metrics.split_window(window)[1] == day(1)
    row = DailyRunStats.objects.get(day=day(1))
    assert (row.errors, row.repeated_errors, row.guardrail_refusals, row.human_rejections) == (3, 1, 4, 1)

    client.force_login(operator)
    html = client.get(reverse("feedback-metrics"), {"days": 7}).content.decode()
    assert '<div class="value" id="figure-repeated-rate">33 %</div>' in html
    assert "1 of 3 errors" in html
    assert '<span id="figure-refusals">not errors: guardrail refusals 4, refused by a reviewer 1</span>' in html
    figures = call(client, "GET", "/metrics?days=7", token=token_for(operator)).json()["errors"]
    assert (figures["errors"], figures["guardrail_refusals"], figures["human_rejections"]) == (3, 4, 1)


def test_the_trials_error_rate_uses_the_one_definition_of_an_error(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 2
    strategy = make_strategy(status="trial")
    made = []
    for what in ("refused by a reviewer", "model error", "guardrail refusal", "clean", "refused by a reviewer"):
        run = make_run(status=Run.Status.SUCCEEDED, score=0.8)
        if what == "refused by a reviewer":
            step(run, error_class="Refused", signature="person-1")
        elif what == "model error":
            step(run, Step.Kind.MODEL_ERROR, error_class="EmptyReply")
        elif what == "guardrail refusal":
            step(run, error_class="GuardrailRefused", signature="guard-1")
        AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm="treatment")
        made.append(run)
    error_rate = next(g for g in trial_stats(strategy).guards if g.name == "error_rate")
    assert (error_rate.treatment.n, error_rate.treatment.mean) == (5, pytest.approx(1 / 5))  # the model error
    # The same runs, by the metrics' own count.
    had_error = Run.objects.filter(pk__in=[r.pk for r in made]).annotate(e=metrics.run_had_error()).filter(e=True)
    assert list(had_error) == [made[1]]


def test_only_production_runs_count_in_every_metric_and_daily_row(reviewer):
    experiment = make_finished_run(created_at=at(3, 9), purpose=Run.Purpose.EXPERIMENT, score=0.0, cost=1.0)
    step(experiment, error_class="ToolError", signature="tool-1")  # earlier, the same error
    production = make_finished_run(created_at=at(2, 9), score=1.0, cost=0.5)
    step(production, error_class="ToolError", signature="tool-1")
    step(production)
    playground = make_finished_run(created_at=at(2, 10), purpose=Run.Purpose.PLAYGROUND, score=0.0, cost=2.0)
    step(playground, error_class="ToolError", signature="tool-2")
    window = Window(since=at(4, 0), until=at(0, 0))

    def figures() -> tuple:
        counts = metrics.period_counts(window)
        total = {name: sum(row[name] for row in counts) for name in ("runs", "errors", "repeated_errors", "cost_sum")}
        tools = {row["tool_name"]: row["calls"] for row in metrics.tool_stats(window)}
        return total, tools, [(row["kind"], row["cost"]) for row in metrics.cost_by_kind(window)]

    expected = (
        {"runs": 1, "errors": 1, "repeated_errors": 0, "cost_sum": 0.5},
        {"read_text_file": 2},
        [("arithmetic", 0.5)],
    )
    assert figures() == expected
    tasks.daily_stats_refresh_task()
    assert list(DailyRunStats.objects.values_list("day", "runs")) == [(day(2), 1)]
    assert figures() == expected
    # A change to an experiment run makes no day due.
    Evaluation.objects.create(run=experiment, evaluator="human", kind=Evaluation.Kind.HUMAN, score=1, author=reviewer)
    Run.objects.filter(pk=playground.pk).update(finished_at=timezone.now())
    assert days_due() == []
