"""The page cache: heavy pages served again from the cache, never across users or browsers,
never hiding a person's own change, a waiting message or a live run."""

import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone

from feedback import pagecache
from feedback.models import Run, Step, Task

from .conftest import make_user
from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db
RUN_LIST = reverse("feedback-run-list")


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


def test_an_active_runs_page_is_at_most_its_poll_interval_old(client, operator):
    run = make_run(text="Before", status=Run.Status.RUNNING, started_at=timezone.now())
    url = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    _warm(client, url)
    _rename(run, "After")
    assert "Before" in client.get(url).content.decode()
    time.sleep(pagecache.LIVE_PAGE_CACHE_SECONDS + 0.5)
    assert "After" in client.get(url).content.decode()


def test_an_aged_entry_is_served_while_another_request_renders_it_again(rf, operator, monkeypatch):
    request = rf.get("/runs/", HTTP_COOKIE="csrftoken=" + "x" * 32)
    request.user = operator
    request.session = {}
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


def _mget_calls() -> int:
    client = cache._cache.get_client(write=True)
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))


def test_a_page_served_again_comes_from_memory_until_anything_changes_it(client, staff):
    run = make_finished_run(user=staff, text="Old task text", finished_at=timezone.now() - timedelta(hours=1))
    client.force_login(staff)
    assert "Old task text" in _warm(client, RUN_LIST)
    client.get(RUN_LIST)
    before = _mget_calls()
    for _ in range(5):
        assert "Old task text" in client.get(RUN_LIST).content.decode()
    # Neither the entry nor the version went over the wire again.
    assert _mget_calls() == before
    _rename(run, "New task text")
    # A person's change in another process (its POST bumps the version there): Redis tells
    # this process, whose next answer is rendered afresh.
    other = cache._cache.get_client(write=True)
    other.incr(cache.make_and_validate_key(pagecache.VERSION_KEY))
    assert "New task text" in client.get(RUN_LIST).content.decode()
