"""The metric definitions against values computed by hand on a small fixture history.

Four days from Sunday 1 November 2026 (UTC); Nov 4 has no runs. One run before the window
(R0, 30 Oct) makes an error "already seen" without being counted itself.

run  created       kind        status     score  outcome           errors (signature)   needed a person
R0   Oct 30        general     succeeded  -      accomplished      D                    human score (outside)
R1   Nov 1 10:00   arithmetic  succeeded  0.8    accomplished      A                    -
R2   Nov 1 11:00   email       failed     0.2    not accomplished  A (rep), B           tool confirmation
R3   Nov 2 09:00   arithmetic  succeeded  0.6    not accomplished  B (rep)              human score
R4   Nov 2 12:00   arithmetic  cancelled  -      not accomplished  -                    cancelled + confirmation
R5   Nov 3 08:00   general     running    -      unknown           C, C (same run)      retried by R6
R6   Nov 3 10:00   general     succeeded  1.0    unknown           A (rep), D (rep)     -

R3 answered ("succeeded") without accomplishing its task; R6 has no verdict (evaluated before
outcomes existed): both count as ended runs that are not a success.
"""

from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command

from feedback import metrics
from feedback.metrics import Window
from feedback.metrics.tools import percentile_cont
from feedback.models import Evaluation, Run, Step, Task, ToolConfirmation

from .factories import make_finished_run

pytestmark = pytest.mark.django_db

K = Task.Kind
S = Run.Status
OC = Run.Outcome


def at(month: int, day: int, hour: int = 12) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


def tool_step(run, tool, *, ms, ok, attempts=1, signature=""):
    index = run.steps.count()
    return Step.objects.create(
        run=run, index=index, kind=Step.Kind.TOOL_CALL, tool_name=tool, duration_ms=ms, success=ok,
        attempts=attempts, error_signature=signature, error="boom" if signature else "",
    )  # fmt: skip


@pytest.fixture
def history(reviewer):
    def run(created, kind, status, score=None, outcome=OC.UNKNOWN):
        return make_finished_run(kind=kind, status=status, score=score, outcome=outcome, created_at=created, output="x")

    r0 = run(at(10, 30), K.GENERAL, S.SUCCEEDED, outcome=OC.ACCOMPLISHED)
    tool_step(r0, "read_file", ms=5, ok=False, signature="D")
    Evaluation.objects.create(run=r0, evaluator="human", kind="human", score=1, author=reviewer)

    r1 = run(at(11, 1, 10), K.ARITHMETIC, S.SUCCEEDED, 0.8, OC.ACCOMPLISHED)
    tool_step(r1, "calculator", ms=100, ok=True)
    tool_step(r1, "calculator", ms=300, ok=False, attempts=3, signature="A")

    r2 = run(at(11, 1, 11), K.EMAIL_TRIAGE, S.FAILED, 0.2, OC.NOT_ACCOMPLISHED)
    tool_step(r2, "calculator", ms=200, ok=False, signature="A")
    tool_step(r2, "read_file", ms=40, ok=False, attempts=2, signature="B")
    ToolConfirmation.objects.create(run=r2, turn=1, tool_call_id="c1", tool_name="send_email")

    r3 = run(at(11, 2, 9), K.ARITHMETIC, S.SUCCEEDED, 0.6, OC.NOT_ACCOMPLISHED)
    tool_step(r3, "calculator", ms=50, ok=True)
    tool_step(r3, "read_file", ms=60, ok=False, signature="B")
    Evaluation.objects.create(run=r3, evaluator="human", kind="human", score=0.6, author=reviewer)

    r4 = run(at(11, 2, 12), K.ARITHMETIC, S.CANCELLED, outcome=OC.NOT_ACCOMPLISHED)
    ToolConfirmation.objects.create(run=r4, turn=1, tool_call_id="c2", tool_name="send_email")

    r5 = run(at(11, 3, 8), K.GENERAL, S.RUNNING)
    tool_step(r5, "search", ms=10, ok=False, signature="C")
    tool_step(r5, "search", ms=30, ok=False, signature="C")
    Step.objects.create(run=r5, index=9, kind=Step.Kind.THOUGHT, thought="not a tool call")

    r6 = run(at(11, 3, 10), K.GENERAL, S.SUCCEEDED, 1.0)
    Run.objects.filter(pk=r6.pk).update(retry_of=r5)
    tool_step(r6, "calculator", ms=400, ok=False, attempts=2, signature="A")
    tool_step(r6, "read_file", ms=80, ok=False, signature="D")
    tool_step(r6, "read_file", ms=20, ok=True)
    # A history of closed days: their daily rows rebuilt, as beat does.
    call_command("rebuild_daily_stats")
    return {"r0": r0, "r1": r1, "r2": r2, "r3": r3, "r4": r4, "r5": r5, "r6": r6}


def window(granularity="day", kind=""):
    return Window(since=at(11, 1, 0), until=at(11, 5, 0), kind=kind, granularity=granularity)


def pick(rows, *keys):
    return [tuple(row[k] for k in keys) for row in rows]


def test_periods_cover_the_window_including_empty_days():
    assert window().periods() == [date(2026, 11, d) for d in (1, 2, 3, 4)]
    assert window("week").periods() == [date(2026, 10, 26), date(2026, 11, 2)]


def test_score_trend_per_day(history):
    rows = metrics.score_trend(window())
    assert pick(rows, "period", "runs", "scored", "succeeded", "accomplished", "unknown") == [
        (date(2026, 11, 1), 2, 2, 1, 1, 0),
        (date(2026, 11, 2), 2, 1, 1, 0, 0),  # R3 answered, not accomplished
        (date(2026, 11, 3), 1, 1, 1, 0, 1),  # R5 is still running: left out; R6 unknown
        (date(2026, 11, 4), 0, 0, 0, 0, 0),
    ]
    assert [r["avg_score"] for r in rows] == pytest.approx([0.5, 0.6, 1.0, None])
    # Accomplished / ended: answering is not succeeding, and unknown is not a success.
    assert [r["success_rate"] for r in rows] == pytest.approx([0.5, 0.0, 0.0, None])


def test_score_trend_per_week_and_kind(history):
    weeks = metrics.score_trend(window("week"))
    assert pick(weeks, "runs", "scored", "succeeded", "accomplished") == [(2, 2, 1, 1), (3, 2, 2, 0)]
    assert [r["avg_score"] for r in weeks] == pytest.approx([0.5, 0.8])
    assert [r["success_rate"] for r in weeks] == pytest.approx([0.5, 0.0])
    arithmetic = metrics.score_trend(window(kind=K.ARITHMETIC))
    assert pick(arithmetic, "runs", "succeeded", "accomplished") == [(1, 1, 1), (2, 1, 0), (0, 0, 0), (0, 0, 0)]
    assert [r["avg_score"] for r in arithmetic] == pytest.approx([0.8, 0.6, None, None])


def test_score_summary(history):
    summary = metrics.score_summary(window())
    assert (summary["runs"], summary["scored"], summary["succeeded"]) == (5, 4, 3)
    assert (summary["accomplished"], summary["unknown"]) == (1, 1)
    assert summary["avg_score"] == pytest.approx(0.65)
    assert summary["success_rate"] == pytest.approx(1 / 5)


def test_repeated_errors_per_day(history):
    rows = metrics.repeated_error_trend(window())
    assert pick(rows, "errors", "repeated", "runs", "runs_with_repeated") == [
        (3, 1, 2, 1),  # R1 A new; R2 A repeated, B new
        (1, 1, 2, 1),  # R3 B repeated (from R2)
        (4, 2, 2, 1),  # R5 C new, C again in the same run: not an earlier run; R6 A and D repeated
        (0, 0, 0, 0),
    ]
    assert [r["repeated_rate"] for r in rows] == pytest.approx([1 / 3, 1.0, 0.5, None])
    assert [r["repeated_per_run"] for r in rows] == pytest.approx([0.5, 0.5, 1.0, None])


def test_repeated_error_summary_counts_errors_first_seen_before_the_window(history):
    summary = metrics.repeated_error_summary(window())
    assert (summary["errors"], summary["repeated"], summary["runs"]) == (8, 4, 6)
    assert summary["repeated_rate"] == pytest.approx(0.5)
    assert summary["repeated_per_run"] == pytest.approx(4 / 6)
    flagged = dict(
        metrics.error_groups(window()).filter(run=history["r6"]).values_list("error_signature", "is_repeated")
    )
    assert flagged == {"A": True, "D": True}


def test_interventions_per_day(history):
    rows = metrics.intervention_trend(window())
    assert pick(rows, "runs", "intervened", "confirmed", "human_scored", "retried", "cancelled") == [
        (2, 1, 1, 0, 0, 0),  # R2 confirmation
        (2, 2, 1, 1, 0, 1),  # R3 human score; R4 cancelled and confirmed: counted once
        (2, 1, 0, 0, 1, 0),  # R5 retried by R6
        (0, 0, 0, 0, 0, 0),
    ]
    assert [r["rate"] for r in rows] == pytest.approx([0.5, 1.0, 0.5, None])


def test_interventions_per_week_and_summary(history):
    weeks = metrics.intervention_trend(window("week"))
    assert pick(weeks, "runs", "intervened") == [(2, 1), (4, 3)]
    summary = metrics.intervention_summary(window())
    assert (summary["runs"], summary["intervened"]) == (6, 4)  # R0's human score is outside
    assert summary["rate"] == pytest.approx(4 / 6)


def test_a_human_score_raises_the_intervention_rate(history, reviewer):
    from feedback import services, tasks

    services.run_add_human_score(run=history["r1"], user=reviewer, score=0.9)
    tasks.daily_stats_refresh_task()  # beat's next rebuild of the closed days that changed
    assert metrics.intervention_trend(window())[0]["intervened"] == 2


def test_tool_stats(history):
    rows = {r["tool_name"]: r for r in metrics.tool_stats(window())}
    assert list(rows) == ["calculator", "read_file", "search"]
    calc, read, search = rows["calculator"], rows["read_file"], rows["search"]
    assert (calc["calls"], calc["succeeded"], calc["retries"]) == (5, 2, 3)
    assert calc["success_rate"] == pytest.approx(0.4)
    assert calc["avg_ms"] == pytest.approx(210)
    # [50, 100, 200, 300, 400]: p50 = 200; p95 at 0.95 * 4 = 3.8 → 300 + 0.8 * 100, estimated within 5%
    assert (calc["p50_ms"], calc["p95_ms"]) == pytest.approx((200, 380), rel=0.05)
    assert (read["calls"], read["succeeded"], read["retries"], read["avg_ms"]) == (4, 1, 1, 50)
    assert (read["p50_ms"], read["p95_ms"]) == pytest.approx((50, 77), rel=0.05)  # [20, 40, 60, 80]
    assert (search["calls"], search["success_rate"], search["retries"]) == (2, 0.0, 0)
    assert (search["p50_ms"], search["p95_ms"]) == pytest.approx((20, 29), rel=0.05)


def test_the_portable_percentile_matches_percentile_cont():
    assert percentile_cont([400, 50, 300, 100, 200], 0.5) == 200
    assert percentile_cont([50, 100, 200, 300, 400], 0.95) == pytest.approx(380)
    assert percentile_cont([20, 40, 60, 80], 0.5) == pytest.approx(50)
    assert percentile_cont([7], 0.95) == 7
    assert percentile_cont([], 0.5) is None


def test_rates_without_data_are_none_not_zero():
    empty = window()
    assert metrics.score_summary(empty)["success_rate"] is None
    assert metrics.repeated_error_summary(empty)["repeated_rate"] is None
    assert metrics.intervention_summary(empty)["rate"] is None
    assert metrics.tool_stats(empty) == []


@pytest.mark.postgresql
def test_a_run_s_repeated_error_is_checked_once_per_signature_not_once_per_error():
    # A long run hits the same error hundreds of times: the metrics page's live part checked each
    # of them against every earlier run (11,533 checks for 19 running runs at 1,000,000 runs).
    import re

    from django.db import connection

    first = make_finished_run(created_at=datetime(2026, 1, 1, 9, tzinfo=UTC))
    later = make_finished_run(created_at=datetime(2026, 1, 2, 9, tzinfo=UTC))
    Step.objects.create(run=first, index=0, kind=Step.Kind.TOOL_CALL, success=False, error_signature="A")
    Step.objects.bulk_create(
        Step(run=later, index=i, kind=Step.Kind.TOOL_CALL, success=False, error_signature="AB"[i % 2])
        for i in range(60)
    )
    window = Window(since=datetime(2026, 1, 2, tzinfo=UTC), until=datetime(2026, 1, 3, tzinfo=UTC))
    assert metrics.error_counts(window, by=()) == [
        {"errors": 60, "repeated_errors": 30, "runs_with_repeated": 1, "guardrail_refusals": 0, "human_rejections": 0}
    ]
    sql, params = metrics.error_groups(window).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    checks = re.search(r"SubPlan.*?\n.*?loops=(\d+)", plan, re.S)
    assert checks and int(checks.group(1)) == 2, plan  # signatures A and B: two checks, not sixty
