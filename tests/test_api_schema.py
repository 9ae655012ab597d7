"""Schemathesis against the OpenAPI document the API serves: for every operation, requests generated
from the document (valid ones and deliberately broken ones), sent to the real application in this
process, as a reviewer who may do everything. No answer may be a server error, and every answer
must be one the document declares, with the declared content type and shape."""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.parameters import ParameterLocation

from agentsite.wsgi import application
from feedback.models import Step

from .api_helpers import token_for
from .conftest import make_user
from .factories import make_finished_run
from .test_strategy_lifecycle import make_strategy

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)


@pytest.fixture
def _connection_kept():
    """The real WSGI application closes the database connection at the end of each request, as it
    should; the test's transaction lives on that connection, so here (as Django's test client
    does) it is kept open."""
    handlers = (signals.request_started, signals.request_finished)
    for signal in handlers:
        signal.disconnect(close_old_connections)
    yield
    for signal in handlers:
        signal.connect(close_old_connections)


@pytest.fixture
def world(db, _connection_kept, settings, demo_workspace):
    # Hundreds of requests in a few seconds, many with broken tokens: the limits are tested elsewhere.
    settings.API_RATE_LIMIT = settings.API_AUTH_FAILURE_LIMIT = "0"
    run = make_finished_run(output="4")
    Step.objects.create(run=run, index=0, kind=Step.Kind.FINAL, thought="4")
    return {
        "token": token_for(make_user("everything", "staff", "operator", "reviewer")),
        "ids": {"run_id": run.pk, "strategy_id": make_strategy().pk, "index": 0},
    }


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_the_api_answers_every_generated_request_as_its_document_says(case, world):
    headers = {}
    if not case.meta.is_negative_at(ParameterLocation.HEADER):
        # A case whose headers are broken on purpose (no token, a malformed one) is sent as made.
        headers["Authorization"] = f"Bearer {world['token']}"
    if case.path_parameters and not case.meta.is_negative_at(ParameterLocation.PATH):
        # Ids of rows that exist, so the operation's own code runs, not only its 404.
        case.path_parameters = {name: world["ids"].get(name, value) for name, value in case.path_parameters.items()}
    # A body the document allows may still break a rule it cannot state (a task of 5 characters or
    # more, a workspace you may use, a reason that is not blank): a 400 for it is right.
    case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])
