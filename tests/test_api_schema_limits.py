"""Every limit the API enforces is stated by its OpenAPI document: for each one, a request that
breaks it is refused (400, nothing changed), and the document, read as JSON, refuses the same
value, while it accepts the valid one beside it; so a client generated from the document would
not send what the server refuses."""

import copy

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from feedback.models import Evaluation, Run, Strategy, StrategyEvent, Task, ToolConfirmation

from .api_helpers import call, token_for
from .factories import make_finished_run, make_run
from .test_strategy_lifecycle import make_strategy

TASK = {"kind": "arithmetic", "text": "What is 2 + 2?"}
FILE = {"name": "notes.txt", "content": "Ship on Friday."}

# (what the limit is, the valid body, the same body breaking it)
TASK_LIMITS = [
    ("text of at least 5 characters", TASK, {**TASK, "text": "Hi"}),
    ("text of at least 5 characters once stripped", TASK, {**TASK, "text": "   hi    "}),
    ("no NUL in the text", TASK, {**TASK, "text": "What is\x00 2 + 2?"}),
    ("no NUL in the expected answer", {**TASK, "expected_answer": "4"}, {**TASK, "expected_answer": "4\x00"}),
    ("a file is not empty", {**TASK, "files": [FILE]}, {**TASK, "files": [{**FILE, "content": ""}]}),
    ("a file is text", {**TASK, "files": [FILE]}, {**TASK, "files": [{**FILE, "content": "bin\x00ary"}]}),
    ("a file's extension", {**TASK, "files": [FILE]}, {**TASK, "files": [{**FILE, "name": "notes.exe"}]}),
    (
        "a file's extension in any case",
        {**TASK, "files": [{**FILE, "name": "NOTES.TXT"}]},
        {**TASK, "files": [{**FILE, "name": "notes.txt.sh"}]},
    ),
    ("a plain file name", {**TASK, "files": [FILE]}, {**TASK, "files": [{**FILE, "name": "../notes.txt"}]}),
]
DECISION = {"action": "approve", "reason": "Fewer repeated errors in the evidence."}
DECISION_LIMITS = [
    ("a decision needs a reason", DECISION, {"action": "approve"}),
    ("a decision's reason is not empty", DECISION, {**DECISION, "reason": ""}),
    ("a decision's reason is not whitespace", DECISION, {**DECISION, "reason": "   "}),
]
REFUSAL = {"decision": "reject", "reason": "Not to a customer."}
CONFIRMATION_LIMITS = [
    ("a refusal needs a reason", REFUSAL, {"decision": "reject"}),
    ("a refusal's reason is not whitespace", REFUSAL, {"decision": "reject", "reason": "  \n "}),
]
SCORE = {"score": 0.6, "comment": "Close."}
SCORE_LIMITS = [
    ("no NUL in a score's comment", SCORE, {**SCORE, "comment": "Close\x00"}),
    ("no NUL in a corrected answer", {**SCORE, "corrected_answer": "4"}, {**SCORE, "corrected_answer": "4\x00"}),
]
# (parameter, a valid value, a value breaking it)
RUN_FILTER_LIMITS = [
    ("error", "ab12", "zz12"),
    ("error", "ab12", "ab1"),
    ("error", "ab12", "AB12"),
    ("error", "ab12", "a" * 41),
    ("tool", "calculator", "shell"),
    ("q", "report", "re\x00port"),
    ("strategy", 1, 0),
]


@pytest.fixture
def document(client) -> dict:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def _body_validator(document: dict, path: str) -> Draft202012Validator:
    """The request body's schema of ``POST path``, with the document's components to resolve."""
    body = document["paths"]["/api/v1" + path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    registry = Registry().with_resource("urn:openapi", DRAFT202012.create_resource(document))
    # The document's references are "#/components/...": resolved against the whole document.
    schema = copy.deepcopy(body)
    _rebase(schema)
    return Draft202012Validator(schema, registry=registry)


def _rebase(node) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
            node["$ref"] = "urn:openapi" + node["$ref"]
        for value in node.values():
            _rebase(value)
    elif isinstance(node, list):
        for value in node:
            _rebase(value)


def _states(validator: Draft202012Validator, good: dict, bad: dict) -> None:
    assert validator.is_valid(good), list(validator.iter_errors(good))
    assert not validator.is_valid(bad), f"the document accepts {bad!r}"


@pytest.mark.parametrize(("limit", "good", "bad"), TASK_LIMITS, ids=[limit for limit, *_ in TASK_LIMITS])
def test_a_task_limit_is_refused_and_stated(client, staff, demo_workspace, document, limit, good, bad):
    _states(_body_validator(document, "/tasks"), good, bad)
    refused = call(client, "POST", "/tasks", token=token_for(staff), body=bad)
    assert refused.status_code in (400, 422), refused.content
    assert not Task.objects.exists() and not Run.objects.exists()
    accepted = call(client, "POST", "/tasks", token=token_for(staff), body=good)
    assert accepted.status_code == 201, accepted.content


@pytest.mark.parametrize(("limit", "good", "bad"), DECISION_LIMITS, ids=[limit for limit, *_ in DECISION_LIMITS])
def test_a_decision_limit_is_refused_and_stated(client, reviewer, document, limit, good, bad):
    strategy = make_strategy()
    path = f"/strategies/{strategy.pk}/decisions"
    _states(_body_validator(document, "/strategies/{strategy_id}/decisions"), good, bad)
    refused = call(client, "POST", path, token=token_for(reviewer), body=bad)
    assert refused.status_code in (400, 422) and "reason" in refused.json()["errors"]
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.PROPOSED and not StrategyEvent.objects.exists()


@pytest.mark.parametrize(
    ("limit", "good", "bad"), CONFIRMATION_LIMITS, ids=[limit for limit, *_ in CONFIRMATION_LIMITS]
)
def test_a_refusal_limit_is_refused_and_stated(client, staff, reviewer, document, limit, good, bad):
    run = make_run(status=Run.Status.AWAITING_CONFIRMATION, user=staff)
    confirmation = ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply")
    _states(_body_validator(document, "/confirmations/{confirmation_id}/decide"), good, bad)
    path = f"/confirmations/{confirmation.pk}/decide"
    refused = call(client, "POST", path, token=token_for(reviewer), body=bad)
    assert refused.status_code in (400, 422) and "reason" in refused.json()["errors"]
    confirmation.refresh_from_db()
    assert confirmation.status == ToolConfirmation.Status.PENDING
    # An approval needs no reason: the document says so too.
    assert _body_validator(document, "/confirmations/{confirmation_id}/decide").is_valid({"decision": "approve"})


@pytest.mark.parametrize(("limit", "good", "bad"), SCORE_LIMITS, ids=[limit for limit, *_ in SCORE_LIMITS])
def test_a_score_limit_is_refused_and_stated(client, reviewer, document, limit, good, bad):
    run = make_finished_run(output="4")
    _states(_body_validator(document, "/runs/{run_id}/score"), good, bad)
    refused = call(client, "POST", f"/runs/{run.pk}/score", token=token_for(reviewer), body=bad)
    assert refused.status_code in (400, 422), refused.content
    assert not Evaluation.objects.filter(run=run).exists()


@pytest.mark.parametrize(("name", "good", "bad"), RUN_FILTER_LIMITS)
def test_a_run_filter_limit_is_refused_and_stated(client, operator, document, name, good, bad):
    make_strategy()  # strategy=1 exists, or is the only one
    (parameter,) = [p for p in document["paths"]["/api/v1/runs"]["get"]["parameters"] if p["name"] == name]
    validator = Draft202012Validator(parameter["schema"])
    _states(validator, good, bad)
    token = token_for(operator)
    refused = call(client, "GET", f"/runs?{name}={bad}", token=token)
    assert refused.status_code in (400, 422) and name in refused.json()["errors"], refused.content
    # The valid value beside it is answered (existence aside: the strategy is the first made).
    if name != "strategy":
        assert call(client, "GET", f"/runs?{name}={good}", token=token).status_code == 200
