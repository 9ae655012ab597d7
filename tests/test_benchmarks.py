"""Every benchmark at a tiny size, so the code behind `make bench` cannot rot. These tests check
that each benchmark runs and reports sane figures; the figures themselves come from `make bench`.
"""

import random
import shutil
from datetime import datetime, time
from pathlib import Path

import pytest
from django.db.models import Sum
from django.utils import timezone

from bench import dashboard, loop, mining, report, worker
from bench.history import BENCH_PASSWORD, fill
from feedback.models import AppliedStrategy, DailyRunStats, DailyToolStats, Evaluation, Run, Step, Strategy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def history(settings):
    # The gunicorn process logs in with the default hashers, not the tests' fast MD5.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    fill(runs=60, long_runs=3, long_run_steps=40, strategies=8, progress=lambda _: None)


def test_the_generator_writes_a_realistic_history(history):
    assert Run.objects.count() == 60
    assert Run.objects.order_by("-step_count").first().step_count == 40
    assert Step.objects.exclude(error_signature="").exists()
    assert Evaluation.objects.exists() and AppliedStrategy.objects.exists()
    assert Strategy.objects.filter(status=Strategy.Status.TRIAL).exists()
    assert DailyRunStats.objects.exists() and DailyToolStats.objects.exists()
    # Outcomes as the evaluators decide them, counted in the closed days' rows as the live metric counts them.
    assert set(Run.objects.values_list("outcome", flat=True)) == {"accomplished", "not_accomplished", "unknown"}
    today = timezone.make_aware(datetime.combine(timezone.localdate(), time.min))
    ended = Run.objects.filter(status__in=["succeeded", "failed", "cancelled"], created_at__lt=today)
    rollups = DailyRunStats.objects.aggregate(accomplished=Sum("accomplished"), judged=Sum("judged"))
    assert rollups == {
        "accomplished": ended.filter(outcome="accomplished").count(),
        "judged": ended.exclude(outcome="unknown").count(),
    }
    assert Evaluation.objects.filter(kind="judge", accomplished__isnull=False).exists()
    # Deterministic: the same seed writes the same history again.
    first = list(Run.objects.order_by("id").values_list("status", "score", "step_count")[:60])
    fill(runs=60, long_runs=3, long_run_steps=40, strategies=8, progress=lambda _: None)
    again = list(Run.objects.order_by("id").values_list("status", "score", "step_count")[60:])
    assert again == first


def test_loop_overhead(db):
    from django.db import connection

    results = loop.run(database_url=worker.database_url(), steps=5, runs=2, inserts=10)
    table = {r.measure: r for r in results}
    assert results[0].measure.startswith("bare INSERT")
    included = table["engine per model call (5-step runs, their evaluation included), against a 100 ms model call"]
    excluded = table["engine per model call (5-step runs, evaluation excluded)"]
    evaluation = table["evaluation per run (evaluate_run after each 5-step run)"]
    assert included.baseline == loop.MODEL_CALL_MS
    # The evaluation is split out: the run alone costs less than the run and its evaluation.
    assert 0 < excluded.value < included.value and evaluation.value > 0
    # Issue 24's target: the engine, evaluation excluded, against LangGraph checkpointing every super-step.
    peer = table["LangGraph ReAct + PostgresSaver per model call (every super-step checkpointed)"]
    ratio = table["engine, evaluation excluded / LangGraph (every super-step checkpointed)"]
    assert ratio.target == 1.0 and ratio.value == pytest.approx(excluded.value / peer.value)
    assert table['engine, evaluation excluded / LangGraph (durability="exit")'].target is None
    assert all(r.value and r.value > 0 for r in results)
    assert connection.get_autocommit()
    assert not Run.objects.filter(task__text=loop.BENCH_TASK).exists()  # it cleans up after itself


def test_worker_throughput_and_concurrency(db, tmp_path):
    results = worker.run(
        folder=tmp_path, runs=4, steps=3, noops=20, concurrency=4, latency_ms=100, slow_runs=4, slow_steps=2
    )
    noop, runs, concurrency = results
    assert noop.value > 0 and runs.value > 0
    assert 0 < concurrency.value <= 4 * 1.05  # never more in flight than the worker's threads


def test_dashboard_latency(history, tmp_path, monkeypatch):
    results = dashboard.run(
        folder=tmp_path, seconds=0.3, username="bench-operator", password=BENCH_PASSWORD,
        collect_static=False, size=20, rate=20, rate_seconds=1,
    )  # fmt: skip
    names = [r.measure for r in results]
    table = {r.measure: r for r in results}
    # Issue 24: /healthz by one client is the baseline; every family by one client against it.
    assert names[:2] == [
        "constant page /healthz, one client, p50",
        "constant page /healthz, one client, p95 (baseline)",
    ]
    healthz = results[1].value
    families = [
        r
        for r in results
        if r.measure.endswith("one client, p95")
        and r.measure.startswith(("trace page,", "run list", "metrics", "live"))
    ]
    assert len(families) == 6 and all(r.value > 0 and r.baseline == healthz for r in families)
    assert {r.target for r in families} == {25.0, 5.0}
    assert table[f"{dashboard.POLL_FAMILY}, one client, p95"].target == 5.0
    assert all(int(r.note.split(" URLs")[0].split(" over ")[1].replace(",", "")) > 1 for r in families)
    assert not any("p95" in name and "one client" not in name and "requests/s" not in name for name in names)
    # No page sends an ETag (plain polling): the revalidation row says so, with no figure.
    revalidation = table["trace page revalidated (If-None-Match, 304), one client, p95"]
    assert revalidation.value is None and "no page sends an ETag" in revalidation.note
    # The page mix at a held rate, against the same mix by one client, with no errors.
    baseline = table["page mix, one client, p95 (baseline)"]
    held = table["page mix at 20 requests/s (held rate, open loop), p95"]
    assert baseline.value > 0 and held.baseline == baseline.value and held.target == 2.0
    assert held.errors == 0 and "no errors" in held.note and held.verdict.startswith(("met", "NOT met (≤"))
    assert held.note.startswith("20 requests in ")

    families = dashboard.page_families(random.Random(7), 20)
    for family in families:
        assert len(family.paths) == len(set(family.paths))  # every request of a family a different URL
    mix = dashboard.page_mix(families, random.Random(11), count=200)
    polls = [path for path, headers in mix if headers == dashboard.HTMX]
    assert polls and all(path.endswith("/summary/") for path in polls)
    assert len({path for path, _ in mix}) > 40


def test_dashboard_without_wrk_uses_the_python_load_generator(history, tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    results = dashboard.run(
        folder=tmp_path, seconds=0.2, username="bench-operator", password=BENCH_PASSWORD,
        collect_static=False, size=10, rate=10, rate_seconds=0.5,
    )  # fmt: skip
    assert "python load generator" in results[1].note


def test_mining_is_measured_over_an_explicit_full_year(history):
    results = mining.run()
    assert [r.measure for r in results] == [
        "error-step pass over 60 runs (a full year: window_days=365) (baseline)",
        "mining job over 60 runs (a full year: window_days=365)",
    ]
    assert all(r.value is not None and r.value > 0 for r in results)


def test_the_report_keeps_other_scales(history, tmp_path):
    out: Path = tmp_path / "BENCHMARKS.md"
    row = report.generation_row(60, 1.5)
    report.write(out, 1_000_000, report.markdown([row]))
    report.write(out, 60, report.markdown([row]))
    report.write(out, 60, report.markdown([row, row]))
    text = out.read_text()
    assert text.count("## 60 runs") == 1 and text.count("## 1,000,000 runs") == 1
    assert "PostgreSQL" in text and "cores" in text
