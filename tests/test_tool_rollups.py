"""The DailyToolStats and DailyToolLatency rollups behind the per-tool figures: they agree with a
direct count over the steps, a run's calls are added when it ends, and the metrics page reads a
window's tools in a fixed number of queries however many steps there are."""

import random
from datetime import UTC, date, datetime, timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from feedback import metrics, services, tasks, tool_metrics
from feedback.metrics import Window
from feedback.models import DailyToolLatency, DailyToolStats, Run, Step, Task
from feedback.rollups import daily_stats_rebuild, rollup_add
from feedback.tool_metrics import latency_bucket, percentile_cont

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
    call_command("rebuild_daily_stats")  # the steps were written past the hooks


WINDOW = Window(since=at(1, 15), until=at(5, 9, 30))


@pytest.mark.parametrize("kind", ["", K.ARITHMETIC])
def test_the_rollups_and_live_edges_give_the_figures_of_a_direct_count(history, kind):
    window = Window(since=WINDOW.since, until=WINDOW.until, kind=kind)
    edges, first, last = metrics.split_window(window)
    assert (len(edges), first, last) == (3, date(2026, 11, 2), date(2026, 11, 5))
    expected = counted_directly(window)
    rows = tool_metrics.tool_stats(window)
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


def test_the_calls_of_runs_not_counted_yet_are_counted_live_then_from_the_rollups(history):
    before = {row["tool_name"]: row["calls"] for row in tool_metrics.tool_stats(WINDOW)}
    inside = make_run(created_at=at(3, 10), status=Run.Status.RUNNING)  # a whole day's run still going
    on_edge = make_run(created_at=at(5, 8), status=Run.Status.RUNNING)
    for run in (inside, on_edge):
        Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=9)
    calls = {row["tool_name"]: row["calls"] for row in tool_metrics.tool_stats(WINDOW)}
    assert calls == {**before, "calculator": before["calculator"] + 2}
    Run.objects.filter(pk__in=[inside.pk, on_edge.pk]).update(status=Run.Status.SUCCEEDED)
    for run in (inside, on_edge):
        rollup_add(run_id=run.pk)  # ended: into the rollups, out of the live count
    assert DailyToolLatency.objects.filter(day=date(2026, 11, 3), tool_name="calculator").exists()
    calls = {row["tool_name"]: row["calls"] for row in tool_metrics.tool_stats(WINDOW)}
    assert calls == {**before, "calculator": before["calculator"] + 2}


def test_the_database_buckets_durations_as_python_does():
    run = make_run()
    edges = {0, 1, 2, 19, 20, 21, 2**31 - 1}
    for bucket in range(1, 442):
        power = round(1.05**bucket)
        edges.update(ms for ms in (power - 1, power, power + 1) if 0 <= ms < 2**31)
    Step.objects.bulk_create(
        Step(run=run, index=i, kind=Step.Kind.TOOL_CALL, tool_name="t", duration_ms=ms) for i, ms in enumerate(edges)
    )
    in_database = dict(run.steps.values_list("duration_ms", tool_metrics.latency_bucket_sql("duration_ms")))
    assert in_database == {ms: latency_bucket(ms) for ms in edges}


# --- kept current --------------------------------------------------------------------------------
def tool_rows(day: int) -> list[tuple]:
    """Each tool's counts and latency histogram {bucket: calls} on one day."""
    histograms: dict[tuple, dict] = {}
    for kind, tool, bucket, calls in DailyToolLatency.objects.filter(day=date(2026, 11, day)).values_list(
        "task_kind", "tool_name", "bucket", "calls"
    ):
        histograms.setdefault((kind, tool), {})[bucket] = calls
    rows = DailyToolStats.objects.filter(day=date(2026, 11, day)).order_by("task_kind", "tool_name")
    return [
        (*row, histograms.get(row[:2], {}))
        for row in rows.values_list("task_kind", "tool_name", "calls", "succeeded", "retries", "timed", "duration_sum")
    ]


def test_a_run_ending_counts_its_tool_calls_once_however_often_it_is_refreshed():
    run = make_run(created_at=at(2), status=Run.Status.SUCCEEDED, final_output="4")
    for index, (ms, ok, attempts) in enumerate([(100, True, 1), (300, False, 3), (None, True, 1)]):
        Step.objects.create(
            run=run, index=index, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=ms, success=ok,
            attempts=attempts,
        )  # fmt: skip
    assert tool_rows(2) == []
    tasks.run_evaluate_task(run.pk)  # what the worker runs once a run has ended
    histogram = {latency_bucket(100): 1, latency_bucket(300): 1}
    expected = [(K.ARITHMETIC, "calculator", 3, 2, 2, 2, 400, histogram)]
    assert tool_rows(2) == expected
    tasks.run_evaluate_task(run.pk)  # a redelivered evaluation
    rollup_add(run_id=run.pk)
    assert tool_rows(2) == expected
    call_command("rebuild_daily_stats")  # and a recount agrees
    assert tool_rows(2) == expected
    assert DailyToolStats.objects.count() == 1


def test_a_human_score_leaves_the_tool_calls_as_they_were_counted(reviewer):
    run = make_run(created_at=at(2), status=Run.Status.SUCCEEDED, score=0.2)
    Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file", duration_ms=40)
    rollup_add(run_id=run.pk)
    expected = [(K.ARITHMETIC, "read_text_file", 1, 0, 0, 1, 40, {latency_bucket(40): 1})]
    assert tool_rows(2) == expected
    services.run_add_human_score(run=run, user=reviewer, score=0.9)
    assert tool_rows(2) == expected


def test_the_beat_safety_net_counts_an_ended_run_missed_and_the_rebuild_forgets_deleted_runs():
    now = timezone.now()
    run = make_run(created_at=now, status=Run.Status.FAILED)  # ended, its evaluation lost
    Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="search_files", duration_ms=7)
    going = make_run(created_at=now, status=Run.Status.RUNNING)  # not counted until it ends
    Step.objects.create(run=going, index=0, kind=Step.Kind.TOOL_CALL, tool_name="search_files", duration_ms=9)
    tasks.daily_stats_refresh_recent_task()
    row = DailyToolStats.objects.get()
    assert (row.day, row.tool_name, row.calls) == (timezone.localdate(now), "search_files", 1)
    assert list(DailyToolLatency.objects.values_list("bucket", "calls")) == [(latency_bucket(7), 1)]
    make_finished_run(created_at=at(2))  # the command counts from the first run on
    run.delete()
    call_command("rebuild_daily_stats")
    assert not DailyToolStats.objects.exists() and not DailyToolLatency.objects.exists()


def test_recounting_one_kind_leaves_the_other_kinds_tools_alone():
    for kind in (K.ARITHMETIC, K.GENERAL):
        run = make_finished_run(kind=kind, created_at=at(2))
        Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=10)
    call_command("rebuild_daily_stats")
    arithmetic = Run.objects.get(task_kind=K.ARITHMETIC)
    Step.objects.create(run=arithmetic, index=1, kind=Step.Kind.TOOL_CALL, tool_name="calculator", duration_ms=10)
    daily_stats_rebuild(since_day=date(2026, 11, 2), until_day=date(2026, 11, 3), kind=K.ARITHMETIC)
    assert [(kind, calls) for kind, _, calls, *_ in tool_rows(2)] == [(K.ARITHMETIC, 2), (K.GENERAL, 1)]


# --- the page ------------------------------------------------------------------------------------
def test_the_metrics_page_reads_the_tools_in_the_same_few_queries_however_many_steps(client, operator):
    rng = random.Random(3)
    runs = [make_finished_run(created_at=timezone.now() - timedelta(days=d, hours=1)) for d in range(1, 30, 3)]

    def render() -> tuple[str, int]:
        client.force_login(operator)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("feedback-metrics"), {"days": 365})
        assert response.status_code == 200
        # Steps are read only for today (the window's one partial day) and for runs not counted
        # yet (none here): the rest is rollups.
        read_steps = [q["sql"] for q in queries if '"feedback_step"' in q["sql"]]
        assert read_steps and all(
            f"'{timezone.localdate()} 00:00:00" in sql or '"counted_at" IS NULL' in sql for sql in read_steps
        )
        return response.content.decode(), len(queries)

    for run in runs:
        add_tool_steps(run, rng, 5)
    call_command("rebuild_daily_stats")
    html, few_steps = render()
    calls = {row["tool_name"]: row["calls"] for row in tool_metrics.tool_stats(Window.last(365))}
    assert sum(calls.values()) == 5 * len(runs)
    assert f'<code>{TOOLS[0]}</code></td><td class="num">{calls[TOOLS[0]]}</td>' in html
    assert 'id="tool-latency-note"' in html and "within 5% of the exact percentiles" in html
    for run in runs:
        add_tool_steps(run, rng, 200)
    call_command("rebuild_daily_stats")
    html, many_steps = render()
    assert sum(row["calls"] for row in tool_metrics.tool_stats(Window.last(365))) == 205 * len(runs)
    assert many_steps == few_steps <= 21  # 20, and the disk figures (selectors/disk.py)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    assert "p95（毫秒，估算）" in client.get(reverse("feedback-metrics"), {"days": 365}).content.decode()
