"""Every API endpoint, every caller: no token, a bad, revoked or expired one, and a token of each
role, plus a read-only token of an account that may do everything. An endpoint added without a
row here fails the last test but one. The run belongs to another staff member, so "staff" here is
someone else's run: it must be invisible to them through every endpoint."""

import pytest

from feedback.api.urls import api
from feedback.datasets.imports import dataset_import
from feedback.models import (
    ApiToken,
    Evaluation,
    Run,
    ScoreConfig,
    Step,
    Strategy,
    StrategyEvent,
    Task,
    ToolConfirmation,
)

from .api_helpers import call, token_for
from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db

CALLERS = ["none", "bad", "revoked", "expired", "nobody", "staff", "operator", "reviewer", "read_only"]
# Words only the other person's run carries: no answer to "staff" may contain them.
SECRET = "quarterly-payroll-7731"


def _runs_listed(body, world):
    return [row["id"] for row in body["data"]]


# (method, path, body, expected status per caller, what a 2xx answer holds). {run} and {strategy}
# are the other person's run and a proposed strategy.
TABLE = [
    ("POST", "/tasks", {"kind": "arithmetic", "text": "What is 6 * 7?"},
     [401, 401, 401, 401, 403, 201, 403, 403, 403],
     lambda body, w: body["task"]["text"] == "What is 6 * 7?" and body["status"] == "queued"),
    ("GET", "/workspaces", None, [401, 401, 401, 401, 403, 200, 200, 200, 200],
     lambda body, w: [row["name"] for row in body] == ["demo"]),
    ("GET", "/me", None, [401, 401, 401, 401, 200, 200, 200, 200, 200],
     lambda body, w: body["username"] and body["token"]["scope"] in ("read", "write")),
    ("GET", "/metrics", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: body["interventions"]["runs"] == 1 and body["granularity"] == "day"),
    ("GET", "/runs", None, [401, 401, 401, 401, 403, 200, 200, 200, 200],
     lambda body, w: _runs_listed(body, w) == ([] if w["caller"] == "staff" else [w["run"].pk])),
    ("GET", "/runs/{run}", None, [401, 401, 401, 401, 403, 404, 200, 200, 200],
     lambda body, w: body["id"] == w["run"].pk and body["task"]["text"].startswith("Summarise")),
    ("GET", "/runs/{run}/steps", None, [401, 401, 401, 401, 403, 404, 200, 200, 200],
     lambda body, w: [s["tool_name"] for s in body["data"]] == ["read_text_file"] and not body["has_more"]),
    ("GET", "/runs/{run}/steps/0", None, [401, 401, 401, 401, 403, 404, 200, 200, 200],
     lambda body, w: body["index"] == 0 and body["arguments"] == {"path": "payroll.csv"}),
    ("POST", "/runs/{run}/score", {"score": 0.25, "outcome": "not_accomplished"},
     [401, 401, 401, 401, 403, 403, 403, 201, 403],
     lambda body, w: body["run"]["score"] == 0.25 and body["run"]["outcome"] == "not_accomplished"),
    ("GET", "/score-configs", None, [401, 401, 401, 401, 403, 200, 200, 200, 200],
     lambda body, w: [(c["name"], c["data_type"]) for c in body] == [("Tone", "boolean")]),
    ("POST", "/runs/{run}/rerun", None, [401, 401, 401, 401, 403, 404, 403, 403, 403], None),
    ("POST", "/runs/{run}/cancel", None, [401, 401, 401, 401, 403, 404, 403, 200, 403],
     lambda body, w: body["id"] == w["run"].pk and body["status"] == "cancelled"),
    ("GET", "/strategies", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: [row["id"] for row in body["data"]] == [w["strategy"].pk]),
    ("GET", "/strategies/{strategy}", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: body["id"] == w["strategy"].pk and body["versions"][0]["new_guidance"] == "Use exact paths."
     and body["versions"][0]["title"] == "Resolve paths"),
    ("POST", "/strategies/{strategy}/decisions", {"action": "approve", "reason": "worth a trial"},
     [401, 401, 401, 401, 403, 403, 403, 200, 403],
     lambda body, w: body["status"] == "trial" and body["events"][0]["reason"] == "worth a trial"),
    # The confirmation's run is queued, not waiting for it: listed to no one, refused to reviewers (409).
    ("GET", "/confirmations", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: body["data"] == []),
    ("POST", "/confirmations/{confirmation}/decide", {"decision": "approve"},
     [401, 401, 401, 401, 403, 403, 403, 409, 403], None),
    # Datasets copy tasks and answers from runs: those who read every run keep them.
    ("GET", "/datasets", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: [row["name"] for row in body["data"]] == ["sums"]),
    ("GET", "/datasets/{dataset}", None, [401, 401, 401, 401, 403, 403, 200, 200, 200],
     lambda body, w: body["version"] == 1 and body["items"][0]["expected"] == 42),
    ("POST", "/datasets", {"name": "more", "format": "jsonl",
                           "content": '{"text": "What is 1 + 1?", "expected": 2, "checker": "numeric"}'},
     [401, 401, 401, 401, 403, 403, 201, 201, 403],
     lambda body, w: body["name"] == "more" and body["version"] == 1),
]  # fmt: skip

# What each refusal says, by caller (a 403 for a read-only token says so).
SAYS = {"none": "Send a token", "bad": "not valid", "revoked": "revoked", "expired": "expired"}


def _counts() -> tuple:
    return (Task.objects.count(), Run.objects.count(), Evaluation.objects.count(), StrategyEvent.objects.count(),
            Run.objects.filter(status=Run.Status.CANCELLED).count())  # fmt: skip


def _token(caller: str) -> str | None:
    if caller == "none":
        return None
    if caller == "bad":
        return "afb_" + "x" * 43
    if caller in ("nobody", "staff", "operator", "reviewer"):
        groups = [] if caller == "nobody" else [caller]
        return token_for(make_user(f"u-{caller}", *groups))
    everything = make_user(f"u-{caller}", "staff", "operator", "reviewer")
    return token_for(
        everything,
        scope=ApiToken.Scope.READ if caller == "read_only" else ApiToken.Scope.WRITE,
        revoked=caller == "revoked",
        expired=caller == "expired",
    )


@pytest.fixture
def world(demo_workspace):
    from .test_strategy_lifecycle import make_strategy

    owner = make_user("owner", "staff")
    run = make_run(user=owner, text=f"Summarise {SECRET}.csv", kind=Task.Kind.FILE_ANALYSIS)
    Step.objects.create(run=run, index=0, kind=Step.Kind.TOOL_CALL, tool_name="read_text_file",
                        arguments={"path": "payroll.csv"}, result={"text": SECRET})  # fmt: skip
    confirmation = ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply")
    sums = dataset_import(
        name="sums", user=owner, fmt="jsonl", content='{"text": "What is 6 * 7?", "expected": 42, "checker": "numeric"}'
    )
    ScoreConfig.objects.create(name="Tone", data_type="boolean")
    return {"run": run, "strategy": make_strategy(), "confirmation": confirmation, "dataset": sums.dataset}


@pytest.mark.parametrize(("method", "path", "body", "expected", "holds"), TABLE)
@pytest.mark.parametrize("caller", CALLERS)
def test_api_access(client, world, caller, method, path, body, expected, holds):
    token = _token(caller)
    before = _counts()
    url = path.format(
        run=world["run"].pk,
        strategy=world["strategy"].pk,
        confirmation=world["confirmation"].pk,
        dataset=world["dataset"].pk,
    )
    response = call(client, method, url, token=token, body=body)
    want = expected[CALLERS.index(caller)]
    assert response.status_code == want, f"{caller} {method} {path}: {response.content[:300]!r}"
    assert response["Content-Type"].startswith("application/json")
    content = response.json()
    if caller == "staff":
        assert SECRET not in response.content.decode()
    if want >= 400:
        assert isinstance(content["detail"], str) and content["detail"]
        assert _counts() == before, "a refused request changed something"
        assert Strategy.objects.get().status == Strategy.Status.PROPOSED
        if want == 401:
            assert SAYS[caller] in content["detail"]
            assert response["WWW-Authenticate"].startswith("Bearer")
        if caller == "read_only":
            assert "read-only" in content["detail"]
    elif holds is not None:
        assert holds(content, {**world, "caller": caller}), content


def test_every_api_endpoint_has_an_access_row():
    paths = api.get_openapi_schema(path_prefix="")["paths"]
    endpoints = {(method.upper(), path) for path, operations in paths.items() for method in operations}
    rows = {(method, path.replace("{run}", "{run_id}").replace("{strategy}", "{strategy_id}")
             .replace("{confirmation}", "{confirmation_id}").replace("{dataset}", "{dataset_id}")
             .replace("/steps/0", "/steps/{index}")) for method, path, *_ in TABLE}  # fmt: skip
    assert endpoints == rows


def test_staff_use_their_own_runs_through_the_api(client, staff, world):
    mine = make_run(user=staff, text="What is 1 + 1?")
    token = token_for(staff)
    assert [row["id"] for row in call(client, "GET", "/runs", token=token).json()["data"]] == [mine.pk]
    assert call(client, "GET", f"/runs/{mine.pk}", token=token).json()["task"]["created_by"] == "staff"
    assert call(client, "GET", f"/runs/{mine.pk}/steps", token=token).json()["data"] == []
    rerun = call(client, "POST", f"/runs/{mine.pk}/rerun", token=token)
    assert rerun.status_code == 201 and rerun.json()["retry_of_id"] == mine.pk
    assert rerun["Location"] == f"/api/v1/runs/{rerun.json()['id']}"
    cancelled = call(client, "POST", f"/runs/{mine.pk}/cancel", token=token)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = call(client, "POST", f"/runs/{mine.pk}/cancel", token=token)
    assert again.status_code == 409 and "already ended" in again.json()["detail"]
    # Scoring is a reviewer's, even of one's own run.
    assert call(client, "POST", f"/runs/{mine.pk}/score", token=token, body={"score": 1}).status_code == 403
