"""Each kind of alert rule (feedback/alerts/) opening on runs made the way the agent makes them, and
the checks of a rule's parameters. Delivery and the pages: test_alerts.py."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

import feedback.tasks  # noqa: F401  (registers the tasks the worker fixture runs)
from feedback.models import (
    AlertIncident,
    AlertRule,
    AppliedStrategy,
    Run,
    Step,
    Strategy,
    Task,
    ToolConfirmation,
)
from feedback.strategies.trials import check_trials

from .alerting import ERROR_RATE, HARMFUL_TRIAL, SCORE_DROP, STUCK_QUEUE, _minutes_ago, _rule, _scored

# isort: split
from .alerting import alert_settings_fixture, evaluate_fixture, worker_fixture  # noqa: F401 (the fixtures)
from .factories import make_finished_run, make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


# --- each kind of rule, on real runs ----------------------------------------------------------------
def test_a_score_drop_opens_below_its_threshold_and_not_on_fewer_runs_than_its_minimum(evaluate):
    _rule(SCORE_DROP, threshold=0.6, min_runs=5)
    _scored(4, 0.2)
    _scored(10, 0.2, minutes_ago=70)  # before the window
    evaluate()
    assert not AlertIncident.objects.exists()
    _scored(1, 0.2)
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "all" and incident.state == "open"
    assert incident.figures["value"] == pytest.approx(0.2) and incident.figures["runs"] == 5
    assert incident.figures["reasons"] == ["threshold"]


def test_a_score_drop_against_the_window_before_opens_for_the_task_kind_that_dropped(evaluate):
    _rule(SCORE_DROP, task_kind=AlertRule.EACH_KIND, change=0.2, min_runs=5)
    for kind, before, now in ((Task.Kind.ARITHMETIC, 0.9, 0.5), (Task.Kind.FILE_ANALYSIS, 0.9, 0.85)):
        _scored(5, before, kind=kind, minutes_ago=90)
        _scored(5, now, kind=kind, minutes_ago=10)
    _scored(4, 0.1, kind=Task.Kind.GENERAL)  # too few runs to judge, before or now
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "arithmetic" and incident.figures["reasons"] == ["change"]
    assert incident.figures["previous_value"] == pytest.approx(0.9) and incident.figures["value"] == pytest.approx(0.5)


def _failed_call(run: Run, *, index: int = 0, error_class: str = "ToolError", signature: str = "") -> None:
    Step.objects.create(
        run=run,
        index=index,
        kind=Step.Kind.TOOL_CALL,
        tool_name="read_text_file",
        success=False,
        error="No such file",
        error_class=error_class,
        error_signature=signature,
    )


def test_an_error_rate_rise_opens_on_failed_runs_and_failed_calls_and_not_below_its_minimum(evaluate):
    _rule(ERROR_RATE, threshold=0.3, min_runs=6)
    at = _minutes_ago(10)
    for _ in range(2):
        make_finished_run(created_at=at)
    make_finished_run(created_at=at, status=Run.Status.FAILED)
    for _ in range(2):
        _failed_call(make_finished_run(created_at=at))
    make_run(created_at=at)  # still queued: not finished, not counted
    evaluate()
    assert not AlertIncident.objects.exists()  # 3 of 5 failing, but 5 runs are fewer than 6
    # A guardrail's refusal is a strategy at work, not a failure.
    _failed_call(make_finished_run(created_at=at), error_class="GuardrailRefused")
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.subject == "all" and incident.figures["measure"] == "failed_runs"
    assert (incident.figures["failing"], incident.figures["runs"]) == (3, 6)
    assert incident.figures["value"] == pytest.approx(0.5)


def test_a_repeated_error_rate_rise_against_the_window_before_opens(evaluate):
    _rule(ERROR_RATE, error_measure=AlertRule.ErrorMeasure.REPEATED_ERRORS, change=0.5, min_runs=3)
    for i in range(3):  # the hour before: three different errors, none seen earlier
        _failed_call(make_finished_run(created_at=_minutes_ago(90)), signature=f"sig-{i}")
    for i in range(3):  # this hour: the same three again
        _failed_call(make_finished_run(created_at=_minutes_ago(10)), signature=f"sig-{i}")
    evaluate()
    incident = AlertIncident.objects.get()
    assert incident.figures["measure"] == "repeated_errors" and incident.figures["reasons"] == ["change"]
    assert (incident.figures["repeated"], incident.figures["errors"]) == (3, 3)
    assert (incident.figures["value"], incident.figures["previous_value"]) == (1.0, 0.0)


def _on_trial(treatment: list[float], control: list[float]) -> Strategy:
    """A strategy on trial with a finished, scored run per score in each arm (as test_trial_trust.py)."""
    strategy = make_strategy(status="trial")
    Strategy.objects.filter(pk=strategy.pk).update(trial_started_at=_minutes_ago(24 * 60))
    _assign(strategy, treatment, control)
    strategy.refresh_from_db()
    return strategy


def _assign(strategy: Strategy, treatment: list[float], control: list[float]) -> None:
    start = _minutes_ago(60)
    for arm, scores in (("treatment", treatment), ("control", control)):
        for i, score in enumerate(scores):
            run = make_run(
                status=Run.Status.SUCCEEDED,
                score=score,
                tokens_in=400,
                tokens_out=50,
                started_at=start,
                finished_at=start + timedelta(seconds=2 + i % 3),
            )
            AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)


def test_a_harmful_trial_opens_on_harm_and_on_a_mismatched_split_and_resolves_once_rolled_back(evaluate, settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    _rule(HARMFUL_TRIAL, min_runs=30)
    harmful = _on_trial([0.3, 0.4, 0.35] * 4, [0.8, 0.9, 0.85] * 4)  # worse; 24 runs
    skewed = _on_trial([0.8, 0.85, 0.9] * 15, [0.8, 0.9, 0.85] * 5)  # as good; 45/15 at a share of 0.5
    evaluate()
    assert list(AlertIncident.objects.values_list("subject", flat=True)) == [f"strategy-{skewed.pk}-split"]
    _assign(harmful, [0.3, 0.4, 0.35], [0.8, 0.9, 0.85])  # 30 runs: judged
    evaluate()
    harm = AlertIncident.objects.get(subject=f"strategy-{harmful.pk}-harm")
    assert harm.figures["scores_worse"] is True and harm.figures["ci_high"] < 0
    assert (harm.figures["treatment_n"], harm.figures["control_n"]) == (15, 15)
    split = AlertIncident.objects.get(subject=f"strategy-{skewed.pk}-split").figures
    assert (split["treatment"], split["control"], split["p_value"] < 0.01) == (45, 15, True)
    assert AlertIncident.objects.count() == 2  # no harm in the skewed trial, no mismatch in the harmful one

    assert check_trials() == [harmful.pk]  # beat's automatic roll-back (never of the mismatched split)
    evaluate()
    harm.refresh_from_db()
    assert harm.state == "resolved"
    assert harm.resolved_figures == {
        "reason": "not_on_trial",
        "strategy": harmful.pk,
        "title": harmful.title,
        "status": "rolled_back",
    }


def _confirmation(run: Run, **fields) -> ToolConfirmation:
    return ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply", **fields)


def test_a_stuck_queued_run_and_an_old_awaiting_confirmation_open_the_stuck_queue_rule(evaluate):
    _rule(STUCK_QUEUE, queued_minutes=15, heartbeat_minutes=5, confirmation_minutes=60)
    stuck = make_run(created_at=_minutes_ago(20))
    make_run(created_at=_minutes_ago(2))  # queued a moment ago
    # Queued again a minute ago, after a reviewer's approval: waiting since then, not since it was created.
    resumed = make_run(created_at=_minutes_ago(180), started_at=_minutes_ago(180))
    _confirmation(resumed, requested_at=_minutes_ago(120), status="approved", decided_at=_minutes_ago(1))
    waiting = make_run(status=Run.Status.AWAITING_CONFIRMATION, created_at=_minutes_ago(180))
    _confirmation(waiting, requested_at=_minutes_ago(120))
    _confirmation(make_run(status=Run.Status.AWAITING_CONFIRMATION), requested_at=_minutes_ago(10))
    silent = make_run(status=Run.Status.RUNNING, started_at=_minutes_ago(30), heartbeat_at=_minutes_ago(10))
    make_run(status=Run.Status.RUNNING, started_at=_minutes_ago(30), heartbeat_at=_minutes_ago(0.05))
    evaluate()
    found = {incident.subject: incident.figures for incident in AlertIncident.objects.all()}
    assert found["queued"]["run_ids"] == [stuck.pk] and found["queued"]["oldest_minutes"] == 20
    assert found["awaiting_confirmation"]["run_ids"] == [waiting.pk]
    assert found["awaiting_confirmation"]["oldest_minutes"] == 120
    assert found["running"]["run_ids"] == [silent.pk]


def test_a_rule_s_parameters_are_checked():
    cases = [
        ({"kind": SCORE_DROP}, "threshold"),  # neither a threshold nor a change
        ({"kind": SCORE_DROP, "threshold": 1.5}, "threshold"),
        ({"kind": ERROR_RATE, "change": 0}, "change"),
        ({"kind": ERROR_RATE, "threshold": 0.2, "min_runs": 1}, "min_runs"),  # no rate of one run
        (
            {"kind": STUCK_QUEUE, "queued_minutes": None, "heartbeat_minutes": None, "confirmation_minutes": None},
            "queued_minutes",
        ),
        ({"kind": HARMFUL_TRIAL, "task_kind": "arithmetic"}, "task_kind"),
        (
            {"kind": STUCK_QUEUE, "webhook_urls": "https://ok.example.org/hook\nftp://files.example.org/x"},
            "webhook_urls",
        ),
        ({"kind": STUCK_QUEUE, "emails": "ops@example.com\nnot an address"}, "emails"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as refused:
            AlertRule(name="r", **fields).full_clean()
        assert list(refused.value.message_dict) == [field], fields
    _rule(SCORE_DROP, threshold=0.5, webhook_urls="https://ok.example.org/hook", emails="ops@example.com")
