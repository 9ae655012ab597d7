"""A task submitted through the API while sending to the broker fails (as on a fresh install whose
Redis transport could not import) is answered 201 with its run; once sending works, the reaper's
next pass sends it and a real worker runs it, once."""

import pytest
from django.test import Client

from agentsite.celery import app
from feedback.agent.checkpoint import reap_stale_runs
from feedback.models import Run, Step

from ..api_helpers import token_for
from ..conftest import make_user
from .worker import wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_run_that_could_not_be_sent_is_answered_201_and_runs_once_sending_works(
    celery_worker_process, settings, monkeypatch
):
    def unsendable(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'packaging'")

    token = token_for(make_user("unsent-staff", "staff"))
    with monkeypatch.context() as patched:
        patched.setattr(app, "send_task", unsendable)
        response = Client(raise_request_exception=False).post(
            "/api/v1/tasks",
            data={"kind": "arithmetic", "text": "What is 12 * 12?", "expected_answer": "144"},
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    assert Run.objects.get(pk=run_id).status == Run.Status.QUEUED

    # The broker can be reached again.
    settings.RUN_STALE_AFTER_SECONDS = 0
    assert reap_stale_runs() == [run_id]
    run = wait_for_run(run_id)

    assert run.status == Run.Status.SUCCEEDED, (run.error, celery_worker_process.log())
    assert run.final_output.endswith("= 144")
    assert list(run.steps.values_list("kind", flat=True)) == [
        Step.Kind.THOUGHT, Step.Kind.TOOL_CALL, Step.Kind.TOOL_CALL, Step.Kind.FINAL
    ]  # fmt: skip
