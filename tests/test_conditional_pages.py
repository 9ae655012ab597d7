"""Conditional responses: a run's page, its parts and the run list are answered 304 Not Modified,
unrendered, while what they show has not changed for their reader, and afresh after any change:
of the run, of its evaluations, confirmations or sub-agent runs, or of who reads, with what rights,
in which language."""

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from feedback import roles
from feedback.models import Evaluation, Run, Step, ToolConfirmation
from feedback.views.evaluation import EVALUATION_WAIT_SECONDS

from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def _tag(client, url: str, query: dict | None = None, headers: dict | None = None) -> str:
    """The ETag of ``url`` as the browser now holds it: asked twice, as a browser's first visit
    creates its CSRF secret, which the second answer's ETag includes."""
    client.get(url, query, headers=headers)
    response = client.get(url, query, headers=headers)
    assert response.status_code == 200 and response["ETag"]
    assert response["Cache-Control"] in ("private, no-cache", "no-cache, private")
    return response["ETag"]


def _again(client, url: str, tag: str, query: dict | None = None, headers: dict | None = None):
    return client.get(url, query, headers={**(headers or {}), "If-None-Match": tag})


@pytest.fixture
def live_run(db):
    start = timezone.now() - timedelta(seconds=30)
    run = make_run(status=Run.Status.RUNNING, started_at=start, step_count=1, plan=[{"title": "Add", "status": "todo"}])
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="First", started_at=start)
    return run


def test_an_unchanged_poll_costs_its_state_read_and_no_rendering(client, operator, live_run):
    client.force_login(operator)
    url = reverse("feedback-run-steps", args=[live_run.pk])
    query = {"after": 0, "seen": "running"}
    tag = _tag(client, url, query, HTMX)
    response = _again(client, url, tag, query, HTMX)
    assert response.status_code == 304 and response.content == b"" and not response.templates
    assert response["ETag"] == tag and "private" in response["Cache-Control"]
    assert int(response["X-Server-Time"]) > 0  # the browser's clock is set by it (live.js)


def _without_tokens(html: str) -> str:
    # Each render masks the CSRF secret afresh (any mask is good): the rest must not move.
    return re.sub(r'(csrfmiddlewaretoken" value=|"x-csrftoken": )"\w+"', r"\1TOKEN", html)


def test_a_live_runs_page_holds_no_clock(client, operator, live_run, monkeypatch):
    run = live_run
    client.force_login(operator)
    url = reverse("feedback-run-detail", args=[run.pk])
    parts = [url, reverse("feedback-run-summary", args=[run.pk]), reverse("feedback-run-steps", args=[run.pk])]
    first = [_without_tokens(client.get(part, headers=HTMX).content.decode()) for part in parts]
    # A minute later, nothing having happened: the same page and parts, to the byte.
    later = timezone.now() + timedelta(minutes=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert [_without_tokens(client.get(part, headers=HTMX).content.decode()) for part in parts] == first
    assert 'csrfmiddlewaretoken" value=TOKEN' in first[0]  # (the masks were there, and only they differ)
    # What the browser moves every second instead (static/js/live.js): the scale grows from the
    # run's start, the elapsed time counts from it; each bar holds its step's own times.
    start_ms = round(run.started_at.timestamp() * 1000)
    assert f'id="trace-scale-{run.pk}" data-trace="trace-{run.pk}" data-span-from="{start_ms}"' in first[0]
    assert f'data-clock-started="{start_ms}" data-clock-waits="[]"' in first[0]
    assert '<dd id="run-elapsed" data-clock="working">—</dd>' in first[0]
    assert '<span class="bar" data-at="0" data-ms="0">' in first[0]


def _new_step(run: Run) -> str:
    Step.objects.create(run=run, index=1, kind=Step.Kind.THOUGHT, thought="A new thought")
    Run.objects.filter(pk=run.pk).update(step_count=2)
    return "A new thought"


def _status(run: Run) -> str:
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now(), final_output="Done")
    return "Answered"


def _plan(run: Run) -> str:
    Run.objects.filter(pk=run.pk).update(plan=[{"title": "Add", "status": "done"}, {"title": "Check the sum"}])
    return "Check the sum"


def _score_and_outcome(run: Run) -> str:
    Run.objects.filter(pk=run.pk).update(score=0.25, outcome=Run.Outcome.NOT_ACCOMPLISHED)
    return "0.25"


def _evaluation(run: Run) -> str:
    Evaluation.objects.create(run=run, evaluator="rule", kind=Evaluation.Kind.RULE, score=0.5, feedback="Terse")
    return "Terse"


def _confirmation(run: Run) -> str:
    ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={})
    return "Waiting for confirmation"


def _cancel_requested(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)


def _child_status(run: Run) -> str:
    child = Run.objects.get(parent=run)
    Run.objects.filter(pk=child.pk).update(status=Run.Status.FAILED)
    return "Failed"


CHANGES = [_new_step, _status, _plan, _score_and_outcome, _evaluation, _confirmation, _cancel_requested, _child_status]


@pytest.mark.parametrize("change", CHANGES, ids=lambda change: change.__name__.strip("_"))
def test_every_change_of_the_run_gives_a_fresh_page(client, reviewer, live_run, change):
    make_run(status=Run.Status.RUNNING, parent=live_run)
    client.force_login(reviewer)
    url = reverse("feedback-run-detail", args=[live_run.pk])
    tag = _tag(client, url)
    assert _again(client, url, tag).status_code == 304
    shown = change(live_run)
    response = _again(client, url, tag)
    assert response.status_code == 200 and response["ETag"] != tag
    if shown:
        assert shown in response.content.decode()
    assert _again(client, url, response["ETag"]).status_code == 304


def test_a_decided_confirmation_gives_a_fresh_page(client, reviewer, live_run):
    asked = timezone.now() - timedelta(seconds=20)
    confirmation = ToolConfirmation.objects.create(
        run=live_run, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={}, requested_at=asked
    )
    Run.objects.filter(pk=live_run.pk).update(status=Run.Status.AWAITING_CONFIRMATION)
    client.force_login(reviewer)
    url = reverse("feedback-run-detail", args=[live_run.pk])
    tag = _tag(client, url)
    assert "Waiting for confirmation" in client.get(url).content.decode()
    ToolConfirmation.objects.filter(pk=confirmation.pk).update(
        status=ToolConfirmation.Status.APPROVED, decided_at=timezone.now()
    )
    response = _again(client, url, tag)
    assert response.status_code == 200 and "Waiting for confirmation" not in response.content.decode()
    # Its wait is closed in the clock the browser runs: requested, then decided (ms since the epoch).
    assert re.search(r'data-clock-waits="\[\[\d+, \d+\]\]"', response.content.decode())


def test_another_reader_never_gets_a_304_of_someone_else_s_page(client, operator, live_run):
    url = reverse("feedback-run-detail", args=[live_run.pk])
    client.force_login(operator)
    tag = _tag(client, url)
    other = make_user("second-operator", roles.OPERATOR)
    client.force_login(other)
    client.cookies["csrftoken"] = client.cookies["csrftoken"].value  # the same browser, another user
    response = _again(client, url, tag)
    assert response.status_code == 200 and "second-operator" in response.content.decode()


def test_a_role_change_gives_a_fresh_page(client, live_run):
    url = reverse("feedback-run-detail", args=[live_run.pk])
    ended = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=live_run.pk).update(status=Run.Status.SUCCEEDED, finished_at=ended)
    person = make_user("person", roles.REVIEWER)
    client.force_login(person)
    tag = _tag(client, url)
    assert "Record score" in client.get(url).content.decode()
    person.groups.set([Group.objects.get(name=roles.OPERATOR)])  # no longer a reviewer
    response = _again(client, url, tag)
    assert response.status_code == 200 and "Record score" not in response.content.decode()


def test_switching_the_language_gives_a_fresh_page(client, operator, live_run):
    url = reverse("feedback-run-detail", args=[live_run.pk])
    client.force_login(operator)
    tag = _tag(client, url)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    response = _again(client, url, tag)
    assert response.status_code == 200 and '<html lang="zh-hans">' in response.content.decode()


def test_a_waiting_message_is_shown_and_never_answered_from_the_browser_s_copy(client, reviewer, live_run):
    url = reverse("feedback-run-detail", args=[live_run.pk])
    client.force_login(reviewer)
    tag = _tag(client, url)
    # A message waits for the next page, though the run has not changed (it is evaluated once ended).
    client.post(reverse("feedback-run-reevaluate", args=[live_run.pk]))
    response = _again(client, url, tag)
    assert (
        response.status_code == 200
        and f"Run #{live_run.pk} is evaluated once it has ended." in response.content.decode()
    )
    # Sent without an ETag: the browser will not ask for it back with the message in it.
    assert "ETag" not in response and "no-cache" in response["Cache-Control"]
    assert _again(client, url, tag).status_code == 304  # the message shown once, the page as before


def test_each_part_is_answered_304_until_its_run_changes(client, operator, live_run):
    client.force_login(operator)
    evaluations = reverse("feedback-run-evaluations", args=[live_run.pk])
    # Each part, and what it shows once the run has ended.
    parts = [
        (reverse("feedback-run-summary", args=[live_run.pk]), {"seen": "running"}, "Answered"),
        (reverse("feedback-run-steps", args=[live_run.pk]), {"after": 0, "seen": "running"}, "Answered"),
        (evaluations, {}, f'hx-get="{evaluations}"'),  # it polls for the evaluation from then on
        (reverse("feedback-run-child", args=[live_run.pk]), {}, "Answered"),
    ]
    tags = [_tag(client, url, query, HTMX) for url, query, _shown in parts]
    for (url, query, _shown), tag in zip(parts, tags, strict=True):
        assert _again(client, url, tag, query, HTMX).status_code == 304, url
    _status(live_run)
    for (url, query, shown), tag in zip(parts, tags, strict=True):
        response = _again(client, url, tag, query, HTMX)
        assert response.status_code == 200 and shown in response.content.decode(), url


def test_the_awaited_evaluation_stops_being_polled_two_minutes_after_the_end(client, operator, monkeypatch):
    now = timezone.now()
    run = make_run(status=Run.Status.SUCCEEDED, started_at=now - timedelta(seconds=5), finished_at=now)
    client.force_login(operator)
    url = reverse("feedback-run-evaluations", args=[run.pk])
    tag = _tag(client, url, headers=HTMX)
    assert "every 2s" in client.get(url, headers=HTMX).content.decode()
    later = now + timedelta(seconds=EVALUATION_WAIT_SECONDS + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    response = _again(client, url, tag, headers=HTMX)
    assert response.status_code == 200 and "every 2s" not in response.content.decode()
    assert "Not evaluated yet." in response.content.decode()


def test_the_run_list_is_answered_304_until_a_row_changes(client, operator):
    runs = [make_run(status=Run.Status.RUNNING, text=f"Task {i}") for i in range(10)]
    client.force_login(operator)
    url = reverse("feedback-run-list")
    tag = _tag(client, url)
    assert _again(client, url, tag).status_code == 304
    Run.objects.filter(pk=runs[3].pk).update(step_count=7)
    response = _again(client, url, tag)
    assert response.status_code == 200
    # One poller for the ten active rows; unchanged, its answer costs its reads alone.
    html = response.content.decode()
    assert html.count("hx-trigger") == 1
    poll = re.search(r'id="run-list-poll"[^>]*hx-get="([^"]+)"', html)[1].replace("&amp;", "&")
    poll_tag = _tag(client, poll, headers=HTMX)
    response = _again(client, poll, poll_tag, headers=HTMX)
    assert response.status_code == 304 and not response.templates
    Run.objects.filter(pk=runs[5].pk).update(status=Run.Status.SUCCEEDED)
    answer = _again(client, poll, poll_tag, headers=HTMX).content.decode()
    assert re.findall(r'<tr id="run-(\d+)" hx-swap-oob="true">', answer) == [str(runs[5].pk)]
    make_run(status=Run.Status.QUEUED, text="A newcomer")
    answer = _again(client, poll, poll_tag, headers=HTMX).content.decode()
    assert "1 new run: show it" in answer
