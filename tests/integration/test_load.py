"""Load: 200 task submissions in a burst from 10 concurrent clients while operators read the
dashboard, with two real worker processes. Every task runs exactly once, every page answers."""

import re
import threading
import time
from collections import Counter

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from feedback import roles
from feedback.models import Run, Step

from ..conftest import make_user
from .worker import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLIENTS, PER_CLIENT, READERS = 10, 20, 3
FINISHED = re.compile(r"run (\d+) finished: (\w+)")


def _in_thread(target, *args) -> threading.Thread:
    def body():
        try:
            target(*args)
        finally:
            connection.close()  # each thread's own database connection

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_a_burst_of_submissions_runs_each_task_exactly_once_while_pages_answer(shared_folders):
    workers = [WorkerProcess(shared_folders, f"load{i}").start() for i in range(2)]
    submitted: list[int] = []
    page_statuses: Counter = Counter()
    errors: list[str] = []
    done = threading.Event()
    submitters = [make_user(f"load-staff-{i}", roles.STAFF) for i in range(CLIENTS)]
    operator = make_user("load-operator", roles.OPERATOR)
    started = time.monotonic()

    def submit(user):
        client = Client()
        client.force_login(user)
        for i in range(PER_CLIENT):
            try:
                response = client.post(
                    reverse("feedback-task-submit"),
                    {"kind": "arithmetic", "text": f"What is {user.pk} * {i} + 7?"},
                )
                assert response.status_code == 302, response.status_code
                submitted.append(int(response["Location"].rstrip("/").rsplit("/", 1)[1]))
            except Exception as exc:  # collected: a thread's failure must fail the test
                errors.append(f"submit: {exc!r}")

    def read():
        client = Client()
        client.force_login(operator)
        pages = [reverse("feedback-run-list"), reverse("feedback-metrics"), reverse("feedback-confirmation-list")]
        while not done.is_set():
            for url in pages:
                page_statuses[client.get(url).status_code] += 1
            run = Run.objects.order_by("-pk").first()
            if run is not None:
                page_statuses[client.get(reverse("feedback-run-detail", args=[run.pk])).status_code] += 1
                # A step that is not written yet is a 404, an answer like any other.
                trace = client.get(reverse("feedback-run-trace-json", args=[run.pk]), {"step": 0})
                page_statuses[200 if trace.status_code == 404 else trace.status_code] += 1

    try:
        readers = [_in_thread(read) for _ in range(READERS)]
        for thread in [_in_thread(submit, user) for user in submitters]:
            thread.join()
        submit_seconds = time.monotonic() - started
        deadline = time.monotonic() + 90
        while Run.objects.filter(status__in=Run.ACTIVE_STATUSES).exists():
            assert time.monotonic() < deadline, "runs still active after 90 s"
            time.sleep(0.5)
        done.set()
        for thread in readers:
            thread.join()
    finally:
        done.set()
        for worker in workers:
            worker.stop()

    assert not errors, errors[:5]
    total = CLIENTS * PER_CLIENT
    assert len(submitted) == len(set(submitted)) == Run.objects.count() == total  # nothing lost
    assert set(page_statuses) == {200}, page_statuses  # pages kept answering
    assert sum(page_statuses.values()) >= READERS * 4
    runs = list(Run.objects.all())
    assert Counter(r.status for r in runs) == {Run.Status.SUCCEEDED: total}
    for run in runs:
        indices = list(Step.objects.filter(run=run).order_by("index").values_list("index", flat=True))
        assert indices == list(range(run.step_count)) and run.step_count > 0  # each step once, in order
        assert Step.objects.filter(run=run, kind=Step.Kind.FINAL).count() == 1
    # Exactly once: across both workers' logs, each run finished once.
    finished = Counter(m.group(1) for w in workers for m in FINISHED.finditer(w.log_path.read_text()))
    assert finished == Counter({str(pk): 1 for pk in submitted})
    assert sum(1 for w in workers if FINISHED.search(w.log_path.read_text())) == 2  # both did work
    print(f"{total} submissions in {submit_seconds:.1f} s; all done in {time.monotonic() - started:.1f} s")
