"""Error pages in the site's layout (DEBUG off, as in production): what happened, what to do, a way
home, in the reader's language; the 405 of a POST-only view too, its Allow header kept."""

import pytest
from django.template import loader
from django.urls import reverse

pytestmark = pytest.mark.usefixtures("_debug_off")

LAYOUT = '<header class="topbar">'
HOME = '<a class="button" href="/">Go to the start page</a>'


@pytest.fixture
def _debug_off(settings):
    settings.DEBUG = False


@pytest.mark.django_db
def test_a_missing_page_is_in_the_layout_and_says_where_to_go(client, operator):
    client.force_login(operator)
    response = client.get("/runs/nowhere/<b>x</b>")
    html = response.content.decode()
    assert response.status_code == 404
    assert LAYOUT in html and 'href="/runs/"' in html  # the navigation of the reader's role
    assert "Page not found" in html and HOME in html
    assert "There is nothing at /runs/nowhere/%3Cb%3Ex%3C/b%3E." in html and "<b>x" not in html
    # A run that does not exist is the same page.
    assert "Page not found" in client.get(reverse("feedback-run-detail", args=[10**9])).content.decode()


@pytest.mark.django_db
def test_a_forbidden_page_is_in_the_layout_and_says_why(client, staff):
    client.force_login(staff)
    response = client.get(reverse("feedback-metrics"))
    html = response.content.decode()
    assert response.status_code == 403
    assert LAYOUT in html and "Not allowed" in html and "Your role does not allow this page or action." in html
    assert HOME in html


@pytest.mark.django_db
def test_a_get_on_a_post_only_address_is_a_405_page_with_its_allow_header(client, reviewer):
    client.force_login(reviewer)
    response = client.get(reverse("feedback-strategies-mine"))
    html = response.content.decode()
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert LAYOUT in html and "Not available this way" in html and HOME in html
    assert "This address does not answer GET; it takes POST only" in html


@pytest.mark.django_db
def test_error_pages_are_translated(client, operator):
    client.force_login(operator)
    zh = {"Accept-Language": "zh-hans"}
    for response in (client.get("/nowhere/", headers=zh), client.get(reverse("feedback-strategies-mine"), headers=zh)):
        html = response.content.decode()
        assert '<html lang="zh-hans">' in html and LAYOUT in html


@pytest.mark.django_db
@pytest.mark.urls("tests.failing_urls")
def test_a_server_error_is_in_the_layout(client, operator):
    client.raise_request_exception = False
    client.force_login(operator)
    response = client.get("/fails/")
    html = response.content.decode()
    assert response.status_code == 500
    assert LAYOUT in html and "Something went wrong" in html and HOME in html
    assert "a bug in a view" not in html  # no internals shown


def test_the_server_error_page_needs_no_request_and_no_database():
    # No django_db mark: any query here raises. Django renders 500.html with no context at all.
    html = loader.get_template("500.html").render()
    assert LAYOUT in html and "Something went wrong" in html and HOME in html
    assert 'action="/i18n/setlang/"' not in html  # no form that would need a CSRF token
