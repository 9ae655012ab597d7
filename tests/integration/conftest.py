import pytest

from .worker import WorkerProcess


@pytest.fixture(scope="session")
def shared_folders(tmp_path_factory):
    return tmp_path_factory.mktemp("shared")


@pytest.fixture(autouse=True)
def _isolated_folders(_isolated_folders, settings, shared_folders):
    # The worker process and this one must see the same workspaces.
    settings.WORKSPACES_ROOT = shared_folders / "workspaces"
    settings.RUN_SANDBOXES_ROOT = shared_folders / "runs"


# Module scope: a test that starts workers of its own (the SIGKILL test) must not share the
# queue with a worker left over from another module.
@pytest.fixture(scope="module")
def celery_worker_process(django_db_setup, shared_folders):
    worker = WorkerProcess(shared_folders).start()
    yield worker
    worker.stop()


@pytest.fixture(autouse=True)
def _worker_settles(request):
    """After a test that used a worker, wait until that worker is idle: ended runs evaluated,
    nothing running. Otherwise the next test's flush (TRUNCATE) deadlocks with its writes."""
    yield
    if "celery_worker_process" not in request.fixturenames:
        return
    import time

    from feedback.models import Run

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        busy = Run.objects.filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING]).exists()
        unevaluated = Run.objects.filter(
            status__in=[Run.Status.SUCCEEDED, Run.Status.FAILED], evaluations__isnull=True
        ).exists()
        if not busy and not unevaluated:
            break
        time.sleep(0.2)
    time.sleep(0.3)  # the export queued after an evaluation
