"""The DailyToolStats and DailyToolLatency rows behind the per-tool figures: closed days read
from them and the rest of a window counted live agree with a direct count over the steps, at
every kind of edge, and the metrics page reads a window's tools in a fixed number of queries
however many steps there are."""

import random
from datetime import UTC, date, datetime, timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from feedback import metrics
from feedback.metrics import Window
from feedback.metrics.tools import latency_bucket, latency_bucket_sql, percentile_cont
from feedback.models import Run, Step, Task

from .factories import make_finished_run, make_run

pytestmark = pytest.mark.django_db

K = Task.Kind
TOOLS = ("calculator", "read_text_file", "search_files", "send_email")


def at(day: int, hour: int = 12, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def add_tool_steps(run: Run, rng: random.Random, count: int) -> None:
    """``count`` steps with random tools, durations (some missing), outcomes and retries, and a
    thought and an unnamed call that are no tool calls."""
    start = run.steps.count()
    steps = [
        Step(
            run=run, index=start + i, kind=Step.Kind.TOOL_CALL, tool_name=rng.choice(TOOLS),
            duration_ms=None if rng.random() < 0.05 else int(rng.lognormvariate(4, 1.2)),
            success=rng.choice((True, True, True, False, None)), attempts=rng.choice((1, 1, 1, 2, 3)),
        )
        for i in range(count)
    ]  # fmt: skip
    steps.append(Step(run=run, index=start + count, kind=Step.Kind.THOUGHT, duration_ms=5))
    steps.append(Step(run=run, index=start + count + 1, kind=Step.Kind.TOOL_CALL, tool_name="", duration_ms=5))
    Step.objects.bulk_create(steps)


def counted_directly(window: Window) -> dict[str, dict]:
    """The per-tool figures computed straight from the steps, exact percentiles included."""
    steps = Step.objects.filter(
        kind=Step.Kind.TOOL_CALL, run__created_at__gte=window.since, run__created_at__lt=window.until
    ).exclude(tool_name="")
    if window.kind:
        steps = steps.filter(run__task_kind=window.kind)
    found: dict[str, dict] = {}
    for tool, ms, ok, attempts in steps.values_list("tool_name", "duration_ms", "success", "attempts"):
        row = found.setdefault(tool, {"calls": 0, "succeeded": 0, "retries": 0, "durations": []})
        row["calls"] += 1
        row["succeeded"] += ok is True
        row["retries"] += attempts - 1
        if ms is not None:
            row["durations"].append(ms)
    for row in found.values():
        durations = row.pop("durations")
        row["avg_ms"] = sum(durations) / len(durations)
        row["p50_ms"] = percentile_cont(durations, 0.5)
        row["p95_ms"] = percentile_cont(durations, 0.95)
    return found


@pytest.fixture
def history():
    """Runs of three kinds from 1 to 5 November 2026, at hours on both sides of the window's
    edges (1 Nov 15:00, 5 Nov 09:30)."""
    rng = random.Random(11)
    kinds = (K.ARITHMETIC, K.FILE_ANALYSIS, K.EMAIL_TRIAGE)
    for day in range(1, 6):
        for hour in (3, 9, 14, 16, 23):
            kind = rng.choice(kinds)
            run = make_finished_run(kind=kind, created_at=at(day, hour, rng.randrange(60)), score=0.5)
            add_tool_steps(run, rng, rng.randint(15, 40))
    call_command("rebuild_daily_stats")  # closed days: their daily rows, as beat rebuilds them


@pytest.mark.parametrize("kind", ["", K.ARITHMETIC])
def test_the_rollups_and_live_edges_give_the_figures_of_a_direct_count(history, kind):
    window = Window(since=at(1, 15), until=at(5, 9, 30), kind=kind)
    edges, first, last = metrics.split_window(window)
    assert (len(edges), first, last) == (2, date(2026, 11, 2), date(2026, 11, 5))
    assert_direct_count(window)


EDGES = [
    # (since, until): a partial first and last day, on midnights, within one day, a single whole
    # day, and beyond the history at both ends.
    (at(1, 0), at(5, 0)),
    (at(2, 0), at(4, 17, 45)),
    (at(3, 2), at(3, 22)),
    (at(4, 0), at(5, 0)),
    (datetime(2026, 10, 20, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
]


@pytest.mark.parametrize(("since", "until"), EDGES)
def test_windows_with_every_kind_of_edge_give_the_figures_of_a_direct_count(history, since, until):
    for kind in ("", K.FILE_ANALYSIS):
        assert_direct_count(Window(since=since, until=until, kind=kind))


def assert_direct_count(window: Window) -> None:
    expected = counted_directly(window)
    rows = metrics.tool_stats(window)
    assert rows
    assert [row["tool_name"] for row in rows] == sorted(expected, key=lambda t: (-expected[t]["calls"], t))
    for row in rows:
        exact = expected[row["tool_name"]]
        assert [row[name] for name in ("calls", "succeeded", "retries")] == [
            exact["calls"],
            exact["succeeded"],
            exact["retries"],
        ]
        assert row["success_rate"] == pytest.approx(exact["succeeded"] / exact["calls"])
        assert row["avg_ms"] == pytest.approx(exact["avg_ms"], rel=1e-12)
        assert row["p50_ms"] == pytest.approx(exact["p50_ms"], rel=0.05)
        assert row["p95_ms"] == pytest.approx(exact["p95_ms"], rel=0.05)


def test_the_database_buckets_durations_as_python_does():
    run = make_run()
    edges = {0, 1, 2, 19, 20, 21, 2**31 - 1}
    for bucket in range(1, 442):
        power = round(1.05**bucket)
        edges.update(ms for ms in (power - 1, power, power + 1) if 0 <= ms < 2**31)
    Step.objects.bulk_create(
        Step(run=run, index=i, kind=Step.Kind.TOOL_CALL, tool_name="t", duration_ms=ms) for i, ms in enumerate(edges)
    )
    in_database = dict(run.steps.values_list("duration_ms", latency_bucket_sql("duration_ms")))
    assert in_database == {ms: latency_bucket(ms) for ms in edges}


# --- the page ------------------------------------------------------------------------------------
def test_the_metrics_page_reads_the_tools_in_the_same_few_queries_however_many_steps(client, operator):
    rng = random.Random(3)
    runs = [make_finished_run(created_at=timezone.now() - timedelta(days=d, hours=1)) for d in range(1, 30, 3)]

    def render() -> tuple[str, int]:
        client.force_login(operator)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("feedback-metrics"), {"days": 365})
        assert response.status_code == 200
        # Steps are read only for today and for the days before the oldest rebuilt one (which
        # hold no runs), counted live: every closed day of the history is a daily row.
        read_steps = [q["sql"] for q in queries if '"feedback_step"' in q["sql"]]
        live_parts = (f"'{timezone.localdate()} 00:00:00", f"< '{metrics.built_days()[0]} 00:00:00")
        assert read_steps and all(any(part in sql for part in live_parts) for sql in read_steps), read_steps
        return response.content.decode(), len(queries)

    for run in runs:
        add_tool_steps(run, rng, 5)
    call_command("rebuild_daily_stats")
    html, few_steps = render()
    calls = {row["tool_name"]: row["calls"] for row in metrics.tool_stats(Window.last(365))}
    assert sum(calls.values()) == 5 * len(runs)
    assert f'<code>{TOOLS[0]}</code></td><td class="num">{calls[TOOLS[0]]}</td>' in html
    assert 'id="tool-latency-note"' in html and "within 5% of the exact percentiles" in html
    for run in runs:
        add_tool_steps(run, rng, 200)
    call_command("rebuild_daily_stats")
    html, many_steps = render()
    assert sum(row["calls"] for row in metrics.tool_stats(Window.last(365))) == 205 * len(runs)
    # N+1 guarded (the metrics page's tool table): the count does not grow with the steps.
    # However many steps: the session's, the disk figures' (selectors/disk.py), and per figure the
    # tables' span, the closed days' rows and the live parts (today, and the empty days before the
    # tables) by one query each; the score configurations' (none here: one query).
    assert many_steps == few_steps <= 28
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    assert "p95（毫秒，估算）" in client.get(reverse("feedback-metrics"), {"days": 365}).content.decode()


def test_a_year_reads_its_tools_in_a_fixed_few_queries(history, django_assert_max_num_queries):
    # N+1 guarded (the metrics page's tool table): a query per day or per tool would grow with the
    # window; a year is one query per table.
    window = Window(since=datetime(2025, 12, 9, tzinfo=UTC), until=datetime(2026, 12, 9, 10, tzinfo=UTC))
    with django_assert_max_num_queries(5):  # the span of the tables; stats and latency; two live edges
        rows = metrics.tool_stats(window)
    assert (
        sum(row["calls"] for row in rows) == Step.objects.filter(kind=Step.Kind.TOOL_CALL).exclude(tool_name="").count()
    )
