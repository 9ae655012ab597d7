"""Plain htmx polling of a run's page: each part polls its own URL, answers what it shows now, and
answers 286 (htmx stops polling) once the run has ended and its evaluation is in."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback import roles
from feedback.models import Evaluation, Run, Step

from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
PARTS = ("feedback-run-summary", "feedback-run-steps", "feedback-run-evaluations", "feedback-run-child")


def _part(client, name: str, run: Run, **query):
    return client.get(reverse(name, args=[run.pk]), query, headers=HTMX)


def test_a_running_run_s_steps_answer_200_with_the_step_just_recorded(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="First thought")
    client.force_login(operator)
    assert _part(client, "feedback-run-steps", run, after=0).content.decode().count('class="step ') == 0
    Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="calculator", arguments={})
    answer = _part(client, "feedback-run-steps", run, after=0, seen="running")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert f'id="run-{run.pk}-step-1"' in html and "calculator" in html
    assert 'hx-trigger="every 1s"' in html  # still live: the tail keeps polling
    # No ETag nor server clock: every poll is rendered afresh.
    assert "ETag" not in answer.headers and "X-Server-Time" not in answer.headers


def test_every_part_of_a_live_run_answers_200(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    client.force_login(operator)
    assert [_part(client, name, run).status_code for name in PARTS] == [200, 200, 200, 200]


def test_an_ended_and_scored_run_s_parts_answer_286(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED, started_at=timezone.now(), finished_at=timezone.now())
    Evaluation.objects.create(run=run, evaluator="rule", kind=Evaluation.Kind.RULE, score=1.0)
    client.force_login(operator)
    answers = [_part(client, name, run, seen="running") for name in PARTS]
    assert [answer.status_code for answer in answers] == [286, 286, 286, 286]
    # htmx still swaps a 286 in: the part shows the run's end, with no poller left.
    assert all('hx-trigger="every' not in answer.content.decode() for answer in answers)
    assert "Answered" in answers[0].content.decode()


def test_the_evaluation_awaited_after_the_end_keeps_its_part_polling(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED, started_at=timezone.now(), finished_at=timezone.now())
    client.force_login(operator)
    waiting = _part(client, "feedback-run-evaluations", run)
    assert waiting.status_code == 200 and 'hx-trigger="every 2s"' in waiting.content.decode()
    Evaluation.objects.create(run=run, evaluator="rule", kind=Evaluation.Kind.RULE, score=0.5)
    Run.objects.filter(pk=run.pk).update(score=0.5, outcome=Run.Outcome.ACCOMPLISHED)
    scored = _part(client, "feedback-run-evaluations", run)
    assert scored.status_code == 286 and 'id="evaluation-table"' in scored.content.decode()
    assert 'hx-trigger="every' not in scored.content.decode()


def test_an_ended_run_whose_evaluation_never_came_stops_after_the_wait(client, operator):
    long_ago = timezone.now() - timedelta(hours=1)
    run = make_run(status=Run.Status.FAILED, started_at=long_ago, finished_at=long_ago)
    client.force_login(operator)
    assert _part(client, "feedback-run-evaluations", run).status_code == 286


def test_the_page_itself_is_a_plain_200(client, operator):
    run = make_run(status=Run.Status.SUCCEEDED, finished_at=timezone.now())
    Evaluation.objects.create(run=run, evaluator="rule", kind=Evaluation.Kind.RULE, score=1.0)
    client.force_login(operator)
    page = client.get(reverse("feedback-run-detail", args=[run.pk]))
    assert page.status_code == 200 and "ETag" not in page.headers


def test_the_summary_of_what_went_wrong_comes_with_the_polled_part(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Let me read it")
    client.force_login(operator)
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert f'id="run-problems-{run.pk}" role="note" hidden' in page  # there, empty, for the polls
    Step.objects.create(
        run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file", arguments={}, success=False
    )
    for name, query in (("feedback-run-steps", {"after": 0}), ("feedback-run-summary", {})):
        html = _part(client, name, run, seen="running", **query).content.decode()
        assert f'id="run-problems-{run.pk}" role="note" hx-swap-oob="outerHTML"' in html
        assert "1 step went wrong:" in html and f'href="#run-{run.pk}-step-1">#1 read_text_file' in html


@pytest.mark.parametrize("name", PARTS)
def test_each_part_keeps_its_permission_checks(client, name):
    owner, other = make_user("alice", roles.STAFF), make_user("bob", roles.STAFF)
    others = make_run(user=other, status=Run.Status.RUNNING, started_at=timezone.now())
    Step.objects.create(run=others, index=0, kind=Step.Kind.THOUGHT, thought=f"secret of run {others.pk}")
    client.force_login(owner)
    refused = _part(client, name, others)
    assert refused.status_code == 403 and "secret of run" not in refused.content.decode()
    assert client.get(reverse(name, args=[others.pk + 1000]), headers=HTMX).status_code == 404
    client.force_login(other)
    assert _part(client, name, others).status_code == 200
