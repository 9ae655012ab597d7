"""Keyset pages of the run list: every run once, newest first, ties on created_at by id."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from feedback import selectors
from feedback.models import Run, Task

from .factories import make_run

pytestmark = pytest.mark.django_db


def test_pages_cover_every_run_once_in_order(operator):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # Three runs share each timestamp: the id must break the tie without losing or repeating one.
    for i in range(11):
        make_run(created_at=start + timedelta(minutes=i // 3))
    seen, cursor = [], None
    while True:
        page, cursor = selectors.run_list_page(operator, before=cursor, size=4)
        seen += [r.pk for r in page]
        if cursor is None:
            break
    expected = list(Run.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    assert seen == expected


def test_a_page_filters_and_costs_one_query(operator):
    for i in range(6):
        make_run(kind=Task.Kind.ARITHMETIC if i % 2 else Task.Kind.GENERAL, status=Run.Status.FAILED)
    first, cursor = selectors.run_list_page(operator, kind=Task.Kind.ARITHMETIC, size=2)
    with CaptureQueriesContext(connection) as queries:
        second, cursor = selectors.run_list_page(operator, kind=Task.Kind.ARITHMETIC, before=cursor, size=2)
        [r.task.created_by for r in second]
    assert len(queries) == 1
    assert {r.task_kind for r in first + second} == {Task.Kind.ARITHMETIC}
    assert cursor is None and len(first + second) == 3


def test_staff_page_through_their_own_runs_only(staff, operator):
    mine = make_run(user=staff)
    make_run(user=operator)
    page, cursor = selectors.run_list_page(staff)
    assert [r.pk for r in page] == [mine.pk] and cursor is None
