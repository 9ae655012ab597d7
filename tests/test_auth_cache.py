"""The signed-in user is read from the cache, and a change to the user row is seen at once."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from feedback.auth import forget_user

pytestmark = pytest.mark.django_db
RUN_LIST = reverse("feedback-run-list")


def _signed_in_as(client) -> str | None:
    response = client.get(RUN_LIST)
    return response.context["user"].get_username() if response.status_code == 200 else None


def test_the_user_is_read_from_the_cache_after_the_first_request(client, operator):
    client.force_login(operator)
    client.get(RUN_LIST)
    # A bulk update sends no signal: the cached user is still the one served...
    get_user_model().objects.filter(pk=operator.pk).update(username="renamed-behind-the-cache")
    assert _signed_in_as(client) == "operator"
    # ...until the entry is dropped.
    forget_user(operator.pk)
    assert _signed_in_as(client) == "renamed-behind-the-cache"


def _deactivate(user) -> None:
    user.is_active = False


def _new_password(user) -> None:
    user.set_password("a-new-long-password")


@pytest.mark.parametrize("change", [_deactivate, _new_password], ids=["deactivated", "new password"])
def test_a_change_to_the_user_signs_them_out_at_the_next_request(client, operator, change):
    client.force_login(operator)
    assert _signed_in_as(client) == "operator"
    change(operator)
    operator.save()
    response = client.get(RUN_LIST)
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_a_deleted_user_is_signed_out(client, operator):
    client.force_login(operator)
    assert _signed_in_as(client) == "operator"
    operator.delete()
    assert client.get(RUN_LIST).status_code == 302


def _gets() -> int:
    from django.core.cache import cache

    client = cache._cache.get_client(write=True)
    return int(client.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def test_the_session_and_the_user_come_from_memory_while_redis_reports_no_change(client, operator):
    client.force_login(operator)
    assert _signed_in_as(client) == "operator"
    before = _gets()
    for _ in range(5):
        assert _signed_in_as(client) == "operator"
    # Neither the session nor the user went over the wire again.
    assert _gets() == before


def test_a_session_ended_in_another_process_is_ended_here_at_once(client, operator):
    from django.contrib.sessions.models import Session
    from django.core.cache import cache

    client.force_login(operator)
    assert _signed_in_as(client) == "operator"
    # The operator logs out in another web process: its session leaves the database and the
    # cache there, and Redis tells this process, whose copy was read a moment ago.
    key = client.session.session_key
    Session.objects.filter(session_key=key).delete()
    cache._cache.get_client(write=True).delete(cache.make_and_validate_key(f"django.contrib.sessions.cached_db{key}"))
    response = client.get(RUN_LIST)
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_logging_out_here_ends_the_session_at_once(client, operator):
    client.force_login(operator)
    assert _signed_in_as(client) == "operator"
    cookie = client.cookies["sessionid"].value
    client.post(reverse("logout"))
    # The old cookie, replayed, is no longer a session.
    client.cookies["sessionid"] = cookie
    response = client.get(RUN_LIST)
    assert response.status_code == 302 and reverse("login") in response["Location"]
