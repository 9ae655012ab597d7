"""An htmx request that cannot be answered with its fragment: a session that ended goes to the
login page as a whole page, a refusal is said, not swapped in."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from feedback import roles

from .factories import make_run

pytestmark = pytest.mark.django_db


def test_an_htmx_request_whose_session_ended_is_sent_to_log_in_from_its_page(client, operator):
    run = make_run(status="running")
    page = reverse("feedback-run-detail", args=[run.pk])
    tail = reverse("feedback-run-steps", args=[run.pk])
    # The trace's tail polling, with no session (it ended, or was logged out elsewhere).
    response = client.get(
        tail, {"after": 3}, headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver{page}?tab=1"}
    )
    # Not the login page swapped into the trace: the browser is told to go there, and to come back
    # to the page it was on, not to the fragment's URL.
    assert response.status_code == 200 and response.content == b""
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/runs/{run.pk}/%3Ftab%3D1"
    # A page URL of another origin is not followed: back to the start page after logging in.
    response = client.get(tail, headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example/x"})
    assert response["HX-Redirect"] == f"{reverse('login')}?next=/"
    # A plain request still gets the ordinary redirect.
    response = client.get(page)
    assert response.status_code == 302 and response["Location"] == f"{reverse('login')}?next=/runs/{run.pk}/"
    # ...and a signed-in one its fragment.
    client.force_login(operator)
    response = client.get(tail, {"after": -1}, headers={"HX-Request": "true", "HX-Current-URL": page})
    assert response.status_code == 200 and "HX-Redirect" not in response


def test_a_refused_htmx_request_gets_a_short_text_and_a_page_the_site_s_page(client, operator):
    run = make_run(status="running")
    page = reverse("feedback-run-detail", args=[run.pk])
    client.force_login(operator)
    operator.groups.remove(Group.objects.get(name=roles.OPERATOR))  # the role is taken away meanwhile
    tail = reverse("feedback-run-steps", args=[run.pk])
    response = client.get(tail, {"after": -1}, headers={"HX-Request": "true"})
    assert response.status_code == 403 and response["Content-Type"].startswith("text/plain")
    assert response.content.decode() == "You are not allowed to do this."
    response = client.get(page)
    html = response.content.decode()
    assert response.status_code == 403 and 'class="topbar"' in html and "<h1>Not allowed</h1>" in html
    # The page that makes htmx say so: the banner is there, hidden, with its words.
    assert 'id="request-error" role="alert" hidden' in html and "this page is out of date" in html
