"""The API's limits on django-ninja's throttles (feedback/api/throttles.py): one token's requests are
counted apart from another's whatever thread serves them, a 429 always says when to come back, an
address past its failures is refused whatever token it sends, every endpoint has the limit, and the
OpenAPI document states the limits."""

import threading
import time

import pytest
from django.test import RequestFactory, override_settings
from openapi_spec_validator import validate

from feedback.api.throttles import TokenThrottle
from feedback.models import ApiToken

from .api_helpers import call, token_for

pytestmark = pytest.mark.django_db


def _request_as(token: ApiToken):
    request = RequestFactory().get("/api/v1/me")
    request.auth = token
    return request


@override_settings(API_RATE_LIMIT="2/min")
def test_two_threads_each_decide_on_their_own_tokens_count(operator):
    token_for(operator), token_for(operator)
    spent, fresh = ApiToken.objects.order_by("pk")
    throttle = TokenThrottle()
    assert [throttle.allow_request(_request_as(spent)) for _ in range(2)] == [True, True]
    # Both requests have read their token's count before either decides (as two threads of one
    # gunicorn process can): each must decide on its own token's count.
    both_read = threading.Barrier(2, timeout=10)
    throttle.timer = lambda: (both_read.wait(), time.time())[1]
    decided = {}

    def ask(name: str, token: ApiToken) -> None:
        decided[name] = throttle.allow_request(_request_as(token))

    threads = [threading.Thread(target=ask, args=args) for args in (("spent", spent), ("fresh", fresh))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert decided == {"spent": False, "fresh": True}


def test_a_rate_lowered_while_requests_were_counted_still_says_when(client, operator, settings):
    token = token_for(operator)
    settings.API_RATE_LIMIT = "5/min"
    assert [call(client, "GET", "/me", token=token).status_code for _ in range(4)] == [200] * 4
    settings.API_RATE_LIMIT = "2/min"  # another process's setting, say, during a deploy
    refused = call(client, "GET", "/me", token=token)
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert 1 < wait <= 60 and refused.json()["detail"] == f"Too many requests: try again in {wait} s."


@override_settings(API_AUTH_FAILURE_LIMIT="2/15min")
def test_past_its_failures_an_address_gets_the_same_refusal_for_a_bad_and_a_good_token(client, operator):
    good = token_for(operator)
    assert [call(client, "GET", "/me", token=f"afb_guess{i}").status_code for i in range(2)] == [401, 401]
    bad, hit = call(client, "GET", "/me", token="afb_guess9"), call(client, "GET", "/me", token=good)
    assert (bad.status_code, hit.status_code) == (429, 429)
    assert bad.json().keys() == hit.json().keys() == {"detail"}
    assert bad["Retry-After"] and hit["Retry-After"]


@override_settings(API_RATE_LIMIT="1/min")
def test_every_endpoint_has_the_token_limit(client, operator):
    token = token_for(operator)
    assert call(client, "GET", "/me", token=token).status_code == 200
    document = client.get("/api/v1/openapi.json").json()
    operations = [(method, path) for path, ops in document["paths"].items() for method in ops]
    assert len(operations) == 20
    for method, path in operations:
        url = (
            path.removeprefix("/api/v1")
            .replace("{run_id}", "1")
            .replace("{strategy_id}", "1")
            .replace("{index}", "0")
            .replace("{confirmation_id}", "1")
            .replace("{dataset_id}", "1")
        )
        answer = call(client, method, url, token=token, body={} if method == "post" else None)
        assert answer.status_code == 429, (method, path, answer.content)


@override_settings(API_RATE_LIMIT="100/hour", API_AUTH_FAILURE_LIMIT="5/10min")
def test_the_openapi_document_states_the_limits(client):
    document = client.get("/api/v1/openapi.json").json()
    validate(document)
    assert "`API_RATE_LIMIT` requests (here `100/hour`" in document["info"]["description"]
    assert "`API_AUTH_FAILURE_LIMIT` times (here `5/10min`)" in document["info"]["description"]
    answers = [op["responses"]["429"] for ops in document["paths"].values() for op in ops.values()]
    assert len(answers) == 20
    for answer in answers:
        header = answer["headers"]["Retry-After"]
        assert header["required"] is True and header["schema"] == {"type": "integer", "minimum": 1}


@pytest.mark.postgresql  # the production cache (Redis, the first run of `make test`): atomic counts
@override_settings(API_RATE_LIMIT="100/min")
def test_requests_of_one_token_arriving_together_are_each_counted(operator):
    token = token_for(operator) and ApiToken.objects.get()
    throttle = TokenThrottle()
    start = threading.Barrier(8, timeout=10)
    passed = []

    def ask() -> None:
        start.wait()
        passed.extend(ok for _ in range(50) if (ok := throttle.allow_request(_request_as(token))))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # ninja's own throttle reads a list of request times and writes it back: several times the limit passed.
    assert len(passed) == 100
