"""The page cache: heavy pages served again from the cache, never across users or browsers,
never hiding a person's own change, a waiting message or a live run's new step; the clock of a
live run moves in every answer, and no placeholder for it ever reaches a browser."""

import re
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone

from feedback import pagecache
from feedback.models import Run, Step, Task

from .conftest import make_user
from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db
RUN_LIST = reverse("feedback-run-list")
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _page_cache_on(settings):
    settings.PAGE_CACHE_SECONDS = 60


def _warm(client, url: str) -> str:
    """GET ``url`` until it is stored: the first answer gives the browser its CSRF cookie (a
    page rendered without one is never stored), the second is stored."""
    client.get(url)
    return client.get(url).content.decode()


def _rename(run: Run, text: str) -> None:
    Task.objects.filter(pk=run.task_id).update(text=text)


def test_a_page_is_served_again_until_a_person_changes_something(client, staff):
    run = make_finished_run(user=staff, text="Old task text", finished_at=timezone.now() - timedelta(hours=1))
    client.force_login(staff)
    assert "Old task text" in _warm(client, RUN_LIST)
    _rename(run, "New task text")
    # What a worker writes waits for the entry to expire...
    assert "Old task text" in client.get(RUN_LIST).content.decode()
    # ...a person's own change (any POST through the site) shows at once: on the page that
    # shows its message (never served from the cache) and on every page after it.
    client.post(reverse("feedback-run-cancel", args=[run.pk]))
    assert "New task text" in client.get(RUN_LIST).content.decode()
    html = client.get(RUN_LIST).content.decode()
    assert "New task text" in html and "Old task text" not in html


def test_entries_belong_to_one_user(client, operator):
    make_finished_run(text="Shared run", finished_at=timezone.now() - timedelta(hours=1))
    other = make_user("second-operator", "operator")
    client.force_login(operator)
    first = _warm(client, RUN_LIST)
    client.force_login(other)
    client.cookies["csrftoken"] = client.cookies["csrftoken"].value  # the same browser, another user
    second = client.get(RUN_LIST).content.decode()
    assert "second-operator" in second and "second-operator" not in first


def test_a_staff_member_never_gets_an_operators_page(client, operator, staff):
    make_finished_run(text="Operator-only run", finished_at=timezone.now() - timedelta(hours=1))
    client.force_login(operator)
    assert "Operator-only run" in _warm(client, RUN_LIST)
    client.force_login(staff)
    assert "Operator-only run" not in client.get(RUN_LIST).content.decode()


def test_an_active_runs_new_step_shows_at_once(client, operator):
    run = make_run(status=Run.Status.RUNNING, started_at=timezone.now())
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    _warm(client, url)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="A thought just written")
    Run.objects.filter(pk=run.pk).update(step_count=1)
    assert "A thought just written" in client.get(url).content.decode()


def _elapsed(html: str) -> float:
    return float(re.search(r'id="run-elapsed">([\d.]+) s<', html)[1])


def _span(html: str, run: Run) -> int | None:
    found = re.search(rf'data-trace="trace-{run.pk}" data-span="(\d+)"', html)
    return int(found[1]) if found else None


def test_a_run_that_just_ended_is_at_most_a_second_old(client, operator):
    # Its evaluation may still arrive, which no column of its state shows at once.
    run = make_run(text="Before", status=Run.Status.SUCCEEDED, started_at=timezone.now(), finished_at=timezone.now())
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    _warm(client, url)
    _rename(run, "After")
    assert "Before" in client.get(url).content.decode()
    time.sleep(pagecache.RECENTLY_ENDED_PAGE_CACHE_SECONDS + 0.5)
    assert "After" in client.get(url).content.decode()


def _signed_in_get(rf, user) -> HttpRequest:
    """A GET from a signed-in user whose browser has its CSRF cookie (so the page may be stored)."""
    request = rf.get("/runs/", HTTP_COOKIE="csrftoken=" + "x" * 32)
    request.user = user
    request.session = {}
    return request


def test_an_aged_entry_is_served_while_another_request_renders_it_again(rf, operator, monkeypatch):
    request = _signed_in_get(rf, operator)
    renders = []

    def render():
        renders.append(1)
        return HttpResponse(f"render {len(renders)}")

    assert pagecache.cached(request, "page", render).content == b"render 1"
    assert pagecache.cached(request, "page", render).content == b"render 1"  # fresh: served
    later = time.time() + 60
    monkeypatch.setattr(pagecache.time, "time", lambda: later)
    key = pagecache._key(request, "page", ())
    cache.add(f"{key}:rendering", 1)  # another request is rendering it
    assert pagecache.cached(request, "page", render).content == b"render 1"  # aged, served meanwhile
    cache.delete(f"{key}:rendering")
    assert pagecache.cached(request, "page", render).content == b"render 2"  # this one renders
    assert len(renders) == 2


def test_an_ended_runs_trace_is_stored(client, operator):
    run = make_finished_run(text="Ended long ago", finished_at=timezone.now() - timedelta(hours=1))
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    assert "Ended long ago" in _warm(client, url)
    _rename(run, "Renamed behind the page's back")
    assert "Ended long ago" in client.get(url).content.decode()


def test_a_waiting_message_is_shown_not_hidden_by_the_cache(client, staff):
    run = make_run(user=staff, status=Run.Status.RUNNING, started_at=timezone.now())
    client.force_login(staff)
    _warm(client, RUN_LIST)
    client.post(reverse("feedback-run-cancel", args=[run.pk]))  # leaves "Run #N will stop."
    assert f"Run #{run.pk} will stop." in client.get(RUN_LIST).content.decode()


def test_a_page_rendered_without_a_csrf_cookie_is_not_stored(client, operator):
    run = make_finished_run(text="Before", finished_at=timezone.now() - timedelta(hours=1))
    client.force_login(operator)
    client.get(RUN_LIST)  # no CSRF cookie yet: not stored
    del client.cookies["csrftoken"]
    _rename(run, "After")
    assert "After" in client.get(RUN_LIST).content.decode()


def test_the_cache_can_be_turned_off(client, operator, settings):
    settings.PAGE_CACHE_SECONDS = 0
    run = make_finished_run(text="Before", finished_at=timezone.now() - timedelta(hours=1))
    client.force_login(operator)
    _warm(client, RUN_LIST)
    _rename(run, "After")
    assert "After" in client.get(RUN_LIST).content.decode()


def test_a_trace_another_user_has_cached_is_still_refused(client, operator, staff):
    run = make_finished_run(text="Not staff's run", finished_at=timezone.now() - timedelta(hours=1))
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    assert "Not staff&#x27;s run" in _warm(client, url)
    client.force_login(staff)
    client.get(url)
    assert client.get(url).status_code == 403


def test_a_trace_step_is_rendered_once_for_every_reader(client, operator, reviewer):
    run = make_finished_run(text="Ended", finished_at=timezone.now() - timedelta(hours=1))
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Written once")
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    assert "Written once" in client.get(url).content.decode()
    # Steps are never changed once written; were one changed behind the page's back, every
    # reader (another user, no page cache entry) would still get the HTML rendered at first.
    Step.objects.filter(run=run).update(thought="Changed behind the page's back")
    client.force_login(reviewer)
    assert "Written once" in client.get(url).content.decode()


@pytest.mark.parametrize("cache_seconds", [60, 0], ids=["cache on", "cache off"])
@pytest.mark.parametrize("live", [True, False], ids=["live", "ended"])
def test_no_placeholder_ever_reaches_a_response(client, operator, settings, cache_seconds, live):
    settings.PAGE_CACHE_SECONDS = cache_seconds
    start = timezone.now() - timedelta(minutes=1)
    ended = {} if live else {"finished_at": start + timedelta(seconds=30)}
    status = Run.Status.RUNNING if live else Run.Status.SUCCEEDED
    run = make_run(status=status, started_at=start, step_count=2, **ended)
    Step.objects.create(run=run, index=0, kind=Step.Kind.THOUGHT, thought="Delegating", started_at=start)
    delegate = Step.objects.create(run=run, index=1, kind=Step.Kind.TOOL_CALL, tool_name="delegate", started_at=start)
    child = make_run(status=status, parent=run, parent_step=delegate, started_at=start, step_count=1, **ended)
    Step.objects.create(run=child, index=0, kind=Step.Kind.THOUGHT, thought="Helping", started_at=start)
    client.force_login(operator)
    parent_url, child_url = (reverse("feedback-run-detail", args=[r.pk]) for r in (run, child))
    answers = [
        (parent_url, {}, {}),  # the page
        (parent_url, {}, HTMX),  # the summary polling itself
        (parent_url, {"after": -1}, HTMX),  # the trace's pages and tail
        (parent_url, {"after": 1, "seen": "running"}, HTMX),
        (parent_url, {"part": "evaluations"}, HTMX),
        (parent_url, {"part": "row"}, HTMX),
        (child_url, {"part": "child"}, HTMX),  # the sub-agent run expanded in its parent's trace
        (child_url, {"nested": "1"}, HTMX),  # ...and its summary polling there
        (child_url, {"after": 0, "nested": "1"}, HTMX),
    ]
    for url, query, headers in answers * 2:  # the second time from the cache, when it is on
        response = client.get(url, query, headers=headers)
        assert response.status_code == 200 and b"\x00" not in response.content, (url, query)
    # The values themselves are there instead, live or not, in every part that shows them.
    page = client.get(parent_url).content.decode()
    assert re.search(r'id="run-elapsed">\d+\.\d s<', page) and _span(page, run) >= 30_000
    nested = client.get(child_url, {"part": "child"}, headers=HTMX).content.decode()
    assert re.search(r"<dt>Elapsed</dt><dd >\d+\.\d s</dd>", nested) and _span(nested, child) >= 30_000
    tail = client.get(parent_url, {"after": 1}, headers=HTMX).content.decode()
    assert f'id="trace-scale-{run.pk}" data-trace="trace-{run.pk}"' in tail and 'hx-swap-oob="outerHTML"' in tail
    assert _span(tail, run) >= 30_000


def test_every_answer_gets_the_values_of_its_moment(rf, operator, settings, caplog):
    request = _signed_in_get(rf, operator)
    renders = []

    def render():
        renders.append(1)
        return HttpResponse(f"<p>{pagecache.placeholder('at')} and {pagecache.placeholder('note')}</p>")

    def answer(at: str) -> bytes:
        return pagecache.cached(request, "page", render, fill={"at": at, "note": "<b>"}).content

    assert answer("1") == b"<p>1 and &lt;b&gt;</p>"  # rendered; values are escaped
    assert answer("2") == b"<p>2 and &lt;b&gt;</p>" and len(renders) == 1  # from the cache
    settings.PAGE_CACHE_SECONDS = 0
    assert answer("3") == b"<p>3 and &lt;b&gt;</p>" and len(renders) == 2  # not cached at all
    # A placeholder left without a value (a view's mistake) shows as nothing, never as NUL.
    assert pagecache.cached(request, "page", render, fill={"at": "4"}).content == b"<p>4 and </p>"
    assert "no value" in caplog.text


@pytest.mark.parametrize(("language", "shown"), [("en", "12,345.6 s"), ("zh-hans", "12345.6 s")])
def test_a_live_runs_elapsed_time_reads_as_an_ended_runs_in_each_language(
    client, operator, settings, monkeypatch, language, shown
):
    # Grouping digits makes the languages differ (zh_Hans groups by four, with no separator).
    settings.USE_THOUSAND_SEPARATOR = True
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    started = now - timedelta(seconds=12345.6)
    live = make_run(status=Run.Status.RUNNING, started_at=started)
    ended = make_run(status=Run.Status.SUCCEEDED, started_at=started, finished_at=now)
    client.force_login(operator)
    for run in (live, ended):  # the live one's filled in by the view, the ended one's rendered
        html = client.get(reverse("feedback-run-detail", args=[run.pk]), headers={"Accept-Language": language})
        assert f'id="run-elapsed">{shown}<' in html.content.decode()


def _mget_calls() -> int:
    client = cache._cache.get_client(write=True)
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))
