"""bench/plans.py names the indexes a page's plan uses, on a tiny bench history (PostgreSQL)."""

import pytest
from django.db import connection

from bench.history import fill
from bench.plans import USES, _plans
from feedback.models import Run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]  # COPY, then VACUUM


def test_the_trace_page_s_plans_name_the_indexes_it_reads_by(client, django_user_model):
    # A run longer than the trace's first page: its first page is read by key, not by a sort.
    fill(runs=30, long_runs=1, long_run_steps=400, strategies=4, progress=lambda _: None)
    client.force_login(django_user_model.objects.get(username="bench-operator"))
    run = Run.objects.order_by("-step_count").first()
    plans = _plans(client, f"/runs/{run.pk}/")
    assert plans and all(sql.startswith("SELECT") and '"feedback_' in sql for sql, _ in plans)
    # Tiny tables are scanned whole; the steps are still read by their (run, index) key.
    named = {name for _, plan in plans for name in USES.findall(plan)}
    assert "step_index_unique" in named
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
        assert named <= {row[0] for row in cursor.fetchall()}
