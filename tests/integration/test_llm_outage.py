"""The LLM endpoint down for a while: runs wait and retry within their limits, then fail with a
clear reason. Real HTTP against a local OpenAI-compatible server (tests/fake_openai.py).

"A minute" is scaled down by settings: LLM_BACKOFF_SECONDS=0.2 and LLM_MAX_ATTEMPTS=6 give a
guaranteed wait of at least 0.1 * (1 + 2 + 4 + 8 + 16) = 3.1 s before a run gives up (at most
twice that); production's 1 s and 4 attempts give 3.5 s, and LLM_MAX_ATTEMPTS=7 gives over 30 s.
"""

import threading
import time

import pytest

from feedback.agent.loop import execute_run
from feedback.models import Run, Step, StepAttempt

from ..factories import make_run
from ..fake_openai import FakeOpenAI, call, completion, error
from ..net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OUTAGE_SECONDS = 2.0
MIN_PATIENCE = 0.1 * (1 + 2 + 4 + 8 + 16)


@pytest.fixture
def endpoint_settings(settings):
    settings.LLM_BACKEND = "openai"
    settings.OPENAI_API_KEY = "test"
    settings.LLM_MAX_ATTEMPTS = 6
    settings.LLM_BACKOFF_SECONDS = 0.2
    settings.LLM_TIMEOUT_SECONDS = 2.0
    return settings


def _answer_after_a_tool_call(body):
    if any(m["role"] == "tool" for m in body["messages"]):
        return {"json": completion("2 + 2 = 4")}
    return {"json": completion(tool_calls=[call("calculator", {"expression": "2 + 2"}, id="c1")])}


def test_a_run_waits_out_an_endpoint_answering_503(endpoint_settings):
    with FakeOpenAI() as endpoint:
        back_at = time.monotonic() + OUTAGE_SECONDS
        endpoint.responder = lambda body: (
            error(503, "overloaded") if time.monotonic() < back_at else _answer_after_a_tool_call(body)
        )
        endpoint_settings.OPENAI_BASE_URL = endpoint.base_url
        run = make_run(text="What is 2 + 2?")
        execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.final_output == "2 + 2 = 4"
    first = run.steps.order_by("index").first()
    failed = StepAttempt.objects.filter(step=first).exclude(error="")
    assert failed.count() >= 2 and all("503" in a.error for a in failed)  # every wait is on the record
    assert [s.index for s in run.steps.order_by("index")] == list(range(run.step_count))


def test_a_run_waits_out_refused_connections_until_the_endpoint_returns(endpoint_settings):
    port = free_port()
    endpoint_settings.OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    holder = {}

    def come_back():
        time.sleep(OUTAGE_SECONDS)
        server = FakeOpenAI(port=port)
        server.responder = _answer_after_a_tool_call
        holder["server"] = server.__enter__()

    threading.Thread(target=come_back, daemon=True).start()
    try:
        run = make_run(text="What is 2 + 2?")
        execute_run(run.pk)
    finally:
        time.sleep(0.1)
        if "server" in holder:
            holder["server"].__exit__(None, None, None)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.error
    errors = StepAttempt.objects.filter(step__run=run).exclude(error="").values_list("error", flat=True)
    assert errors and all("APIConnectionError" in e for e in errors)


def test_an_endpoint_down_for_longer_fails_the_run_with_a_clear_reason(endpoint_settings):
    endpoint_settings.OPENAI_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens
    run = make_run(text="What is 2 + 2?")
    started = time.monotonic()
    execute_run(run.pk)
    waited = time.monotonic() - started
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("The model could not be reached after 6 attempt(s): APIConnectionError")
    assert MIN_PATIENCE <= waited < 2 * MIN_PATIENCE + 5  # it waited, within its limits
    step = run.steps.get()
    assert step.kind == Step.Kind.MODEL_ERROR and step.attempt_rows.count() == 6


def test_a_permanent_error_is_not_retried(endpoint_settings):
    with FakeOpenAI() as endpoint:
        endpoint.responder = lambda body: error(401, "Incorrect API key provided")
        endpoint_settings.OPENAI_BASE_URL = endpoint.base_url
        run = make_run(text="What is 2 + 2?")
        execute_run(run.pk)
        assert len(endpoint.requests) == 1
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "401" in run.error and "after 1 attempt(s)" in run.error
