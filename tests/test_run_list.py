"""The run list: filters in the URL, full-text search, sort and keyset pages."""

from datetime import timedelta

import pytest
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from feedback.models import AppliedStrategy, Run, Step, Strategy, StrategyVersion, Task

from .factories import make_run

pytestmark = pytest.mark.django_db
URL = reverse("feedback-run-list")


def _ids(html: str, runs: list[Run]) -> list[int]:
    """Which of ``runs`` the page lists, in page order."""
    found = [(html.find(f'id="run-{r.pk}"'), r.pk) for r in runs]
    return [pk for position, pk in sorted(found) if position >= 0]


@pytest.fixture
def runs(db):
    now = timezone.now()
    a = make_run(text="Summarise report.txt and count its words", kind=Task.Kind.FILE_ANALYSIS,
                 status=Run.Status.SUCCEEDED, score=0.9, created_at=now - timedelta(days=3))  # fmt: skip
    b = make_run(text="Classify the urgent emails in inbox/", kind=Task.Kind.EMAIL_TRIAGE,
                 status=Run.Status.FAILED, score=0.2, created_at=now - timedelta(days=1))  # fmt: skip
    c = make_run(text="What is 6 * 7?", status=Run.Status.SUCCEEDED, score=None, created_at=now)
    Step.objects.create(run=b, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file", success=False,
                        error="missing", error_signature="deadbeef" * 5)  # fmt: skip
    Step.objects.create(run=a, index=0, kind=Step.Kind.TOOL_CALL, tool_name="analyze_text", success=True)
    strategy = Strategy.objects.create(title="Look in docs/", pattern_kind=Strategy.PatternKind.MANUAL)
    version = StrategyVersion.objects.create(strategy=strategy, number=1, pattern="p", new_guidance="g")
    AppliedStrategy.objects.create(run=a, strategy_version=version, arm=AppliedStrategy.Arm.ACTIVE)
    AppliedStrategy.objects.create(run=c, strategy_version=version, arm=AppliedStrategy.Arm.CONTROL)
    return {"a": a, "b": b, "c": c, "strategy": strategy}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, "cba"),
        ({"status": "succeeded"}, "ca"),
        ({"kind": "email_triage"}, "b"),
        ({"score_min": "0.5"}, "a"),
        ({"score_max": "0.5"}, "b"),
        ({"tool": "read_text_file"}, "b"),
        ({"error": "deadbeef"}, "b"),
        ({"q": "emails"}, "b"),  # stemmed: "emails" finds "emails", and would find "email"
        # Stemmed both ways, several words: PostgreSQL's text search, SQLite's FTS5 index.
        ({"q": "counting words"}, "a"),
        ({"q": "summarise words"}, "a"),
        ({"q": "words -summarise"}, ""),
        ({"sort": "oldest"}, "abc"),
        ({"sort": "score"}, "abc"),  # unscored last
        ({"since": "2000-01-01", "kind": "file_analysis"}, "a"),
    ],
)
def test_filters_search_and_sort(client, operator, runs, query, expected):
    client.force_login(operator)
    html = client.get(URL, query).content.decode()
    assert _ids(html, list(runs[k] for k in "abc")) == [runs[k].pk for k in expected]


@pytest.mark.postgresql
@pytest.mark.parametrize("few", [1000, 1], ids=["rare word: by the matching tasks' ids", "common word: by date"])
def test_a_search_finds_the_same_runs_whether_its_word_is_rare_or_common(client, operator, runs, few):
    # A rare word's tasks are looked up by the index first (a walk by date testing every run's
    # task took 36 s at a million runs); a common one's are met on the walk. Same answers.
    # search_runs reads the name of its own module: the package's copy of it would change nothing.
    from feedback.selectors import run_listing

    more = [make_run(text=f"Classify the emails in inbox {n}", kind=Task.Kind.EMAIL_TRIAGE) for n in range(3)]
    client.force_login(operator)
    original, run_listing.SEARCH_FEW_TASKS = run_listing.SEARCH_FEW_TASKS, few
    try:
        html = client.get(URL, {"q": "emails"}).content.decode()
    finally:
        run_listing.SEARCH_FEW_TASKS = original
    listed = [runs["a"], runs["b"], runs["c"], *more]
    assert _ids(html, listed) == [r.pk for r in reversed(more)] + [runs["b"].pk]


def test_a_strategy_filter_counts_only_runs_it_was_applied_to(client, operator, runs):
    client.force_login(operator)
    html = client.get(URL, {"strategy": runs["strategy"].pk}).content.decode()
    assert _ids(html, [runs["a"], runs["b"], runs["c"]]) == [runs["a"].pk]  # c was in the control arm


def test_the_strategy_filter_offers_only_strategies_applied_to_a_run(client, operator, runs):
    withheld = Strategy.objects.create(title="Only ever withheld", pattern_kind=Strategy.PatternKind.MANUAL)
    version = StrategyVersion.objects.create(strategy=withheld, number=1, pattern="p", new_guidance="g")
    AppliedStrategy.objects.create(run=runs["b"], strategy_version=version, arm=AppliedStrategy.Arm.CONTROL)
    Strategy.objects.create(title="Proposed, never tried", pattern_kind=Strategy.PatternKind.MANUAL)
    client.force_login(operator)

    options = client.get(URL).context["form"].fields["strategy"].choices

    assert [label for _, label in options] == ["Any", str(runs["strategy"])]


def test_a_bad_filter_says_so_and_the_others_still_apply(client, operator, runs):
    client.force_login(operator)
    html = client.get(URL, {"score_min": "lots", "kind": "email_triage"}).content.decode()
    assert "Enter a number." in html
    assert _ids(html, [runs["a"], runs["b"], runs["c"]]) == [runs["b"].pk]


def test_no_match_has_its_own_empty_state(client, operator, runs):
    client.force_login(operator)
    html = client.get(URL, {"q": "zebra"}).content.decode()
    assert "No runs match these filters." in html and "Clear filters" in html


def test_keyset_pages_walk_the_whole_list_in_bounded_queries(client, operator, django_assert_max_num_queries):
    now = timezone.now()
    task = Task.objects.create(text="same task", kind=Task.Kind.GENERAL)
    # Equal timestamps in pairs: the id breaks ties, so no run is skipped or shown twice.
    Run.objects.bulk_create(
        Run(task=task, task_kind=task.kind, created_at=now - timedelta(minutes=i // 2), score=(i % 7) / 7)
        for i in range(120)
    )
    client.force_login(operator)
    for sort in ("newest", "oldest", "score"):
        pages, url, params = [], URL, {"sort": sort, "kind": "general"}
        while True:
            # N+1 guarded: a page of the run list reads its rows' tasks and scores with the page,
            # not per row, on every page of every sort.
            with django_assert_max_num_queries(10):
                response = client.get(url, params)
            pages.append([r.pk for r in response.context["page"].runs])
            assert bool(response.context["previous_url"]) == (len(pages) > 1)
            if not response.context["next_url"]:
                break
            url, params = URL + response.context["next_url"], None
            assert "kind=general" in url and "sort=" + sort in url  # filters survive paging
        seen = [pk for page in pages for pk in page]
        assert len(seen) == 120 and len(set(seen)) == 120
        # And back again, page by page, to the first: the same pages, the first without a way back.
        for expected in reversed(pages[:-1]):
            url = URL + response.context["previous_url"]
            assert "kind=general" in url and "sort=" + sort in url
            response = client.get(url)
            assert [r.pk for r in response.context["page"].runs] == expected
            assert response.context["next_url"]
        assert not response.context["previous_url"]


def test_html_in_a_task_is_text_in_the_list(client, operator):
    make_run(text='<script>alert("x")</script>')
    client.force_login(operator)
    html = client.get(URL).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;x&quot;)" in html


def _poll(html: str) -> tuple[str, str] | None:
    """The run table's own poll, if it polls: its URL and how often."""
    import re
    from html import unescape

    found = re.search(r'id="run-table" hx-get="([^"]+)" hx-trigger="every (\w+)"', html)
    return (unescape(found[1]), found[2]) if found else None


def test_the_first_page_polls_itself_and_shows_the_runs_that_arrive(client, operator, runs):
    client.force_login(operator)
    poll, every = _poll(client.get(URL, {"kind": Task.Kind.EMAIL_TRIAGE}).content.decode())
    assert "kind=email_triage" in poll and every == "5s"  # its own URL: the filters kept
    # One run of the filtered kind arrives, and one of another kind (not listed).
    new = make_run(text="Triage the new mail", kind=Task.Kind.EMAIL_TRIAGE)
    other = make_run(text="Another kind", kind=Task.Kind.GENERAL)
    answer = client.get(poll, headers={"HX-Request": "true"})
    assert answer.status_code == 200
    html = answer.content.decode()
    assert html.lstrip().startswith('<div id="run-table"')  # the table alone
    assert f'id="run-{new.pk}"' in html and f'id="run-{other.pk}"' not in html
    assert _ids(html, [new, runs["b"]]) == [new.pk, runs["b"].pk]  # newest first, above the rest


def test_an_empty_list_polls_for_its_first_run(client, operator):
    client.force_login(operator)
    poll, _every = _poll(client.get(URL).content.decode())
    first = make_run(text="The very first")
    assert f'id="run-{first.pk}"' in client.get(poll, headers={"HX-Request": "true"}).content.decode()


def test_only_a_page_that_may_change_polls_and_the_others_stop(client, operator, runs):
    client.force_login(operator)
    assert _poll(client.get(URL, {"sort": "score"}).content.decode()) is None
    cursor = f"{runs['c'].created_at.isoformat()}_{runs['c'].pk}"
    assert _poll(client.get(URL, {"after": cursor}).content.decode()) is None
    # Asked by htmx (a poll that was running), a page that will not change stops it: 286.
    stopped = client.get(URL, {"sort": "score"}, headers={"HX-Request": "true"})
    assert stopped.status_code == 286 and f'id="run-{runs["a"].pk}"' in stopped.content.decode()
    # A page with an active row polls, often, whatever its sort.
    Run.objects.filter(pk=runs["a"].pk).update(status=Run.Status.RUNNING)
    poll, every = _poll(client.get(URL, {"sort": "score"}).content.decode())
    assert "sort=score" in poll and every == "2s"
    assert client.get(poll, headers={"HX-Request": "true"}).status_code == 200


@pytest.mark.postgresql
@pytest.mark.parametrize("sort", ["score", "newest"])
def test_a_deep_page_starts_its_index_scan_at_the_cursor(runs, sort):
    # At 1,000,000 runs a page deep in the score-sorted list took 2.7 s: the keyset condition was
    # only an OR, which PostgreSQL can filter by but not start an index scan at.
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from feedback.selectors import RUN_SORTS, run_cursor, run_page

    field = RUN_SORTS[sort][0]
    first = run_page(Run.objects.all(), sort=sort, size=1)
    cursor = run_cursor(run_page(Run.objects.annotate(sort_score=Coalesce("score", Value(-1.0))), sort=sort,
                                 size=1).runs[0], field)  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        page = run_page(Run.objects.all(), sort=sort, cursor=cursor, size=1)
    assert page.runs and page.runs[0] != first.runs[0]  # the page after the first one
    with transaction.atomic(), connection.cursor() as cursor_:
        cursor_.execute("SET LOCAL enable_seqscan = off")
        cursor_.execute("EXPLAIN " + queries.captured_queries[-1]["sql"])
        plan = "\n".join(row[0] for row in cursor_.fetchall())
    assert "Index Cond" in plan, plan


@pytest.mark.postgresql
def test_a_page_inside_a_tie_group_starts_at_the_cursor_s_id():
    # Sorted by score, the unscored runs share one value (126,000 of them at 1,000,000 runs): with
    # the value alone as its bound, a page deep among them walked the whole group (90 ms).
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from feedback.selectors import run_cursor, run_page

    task = Task.objects.create(text="same task", kind=Task.Kind.GENERAL)
    Run.objects.bulk_create(Run(task=task, task_kind=task.kind) for _ in range(300))
    unscored = Run.objects.annotate(sort_score=Coalesce("score", Value(-1.0))).order_by("-id")
    cursor = run_cursor(unscored[250], "sort_score")
    with CaptureQueriesContext(connection) as queries:
        page = run_page(Run.objects.all(), sort="score", cursor=cursor, size=10)
    assert [r.pk for r in page.runs] == [r.pk for r in unscored[251:261]]
    with transaction.atomic(), connection.cursor() as cursor_:
        cursor_.execute("SET LOCAL enable_seqscan = off")
        cursor_.execute("EXPLAIN " + queries.captured_queries[0]["sql"])
        plan = "\n".join(row[0] for row in cursor_.fetchall())
    bounds = [line for line in plan.splitlines() if "Index Cond" in line]
    assert any("id <" in line for line in bounds), plan
