"""The Content-Security-Policy: strict, on every page, and no template that would need it looser."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from .factories import make_run

pytestmark = pytest.mark.django_db

EXPECTED = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def _policy(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


def test_every_page_carries_the_strict_policy(client, reviewer):
    run = make_run()
    pages = [reverse("login"), reverse("password_reset")]
    for page in pages:
        assert _policy(client.get(page)) == EXPECTED, page
    client.force_login(reviewer)
    for page in [
        reverse("feedback-run-list"),
        reverse("feedback-run-detail", args=[run.pk]),
        reverse("feedback-metrics"),
        reverse("feedback-strategy-list"),
        reverse("password_change"),
    ]:
        response = client.get(page)
        assert response.status_code == 200 and _policy(response) == EXPECTED, page
    # htmx's fragments and the answers of refused requests carry it too.
    fragment = client.get(reverse("feedback-run-steps", args=[run.pk]), {"after": -1}, headers={"HX-Request": "true"})
    assert _policy(fragment) == EXPECTED
    assert "unsafe" not in fragment["Content-Security-Policy"]


TEMPLATES = sorted(Path(settings.BASE_DIR, "templates").rglob("*.html"))
# What a strict policy refuses in HTML: inline scripts (a data block of type application/json is
# not run, so it is allowed), <style> elements, style attributes, event handler attributes, htmx's
# hx-on (which needs eval) and javascript: URLs.
REFUSED = [
    (r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", "an inline script"),
    (r"<style\b", "a <style> element"),
    (r"\sstyle=", "a style attribute"),
    (r"\son[a-z]+=", "an event handler attribute"),
    (r"\shx-on[:-]", "hx-on (eval)"),
    (r"javascript:", "a javascript: URL"),
]


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(settings.BASE_DIR)))
def test_no_template_needs_a_looser_policy(path):
    # What the comments say is not markup.
    text = re.sub(r"{% comment %}.*?{% endcomment %}|{#.*?#}", "", path.read_text(), flags=re.S)
    for pattern, what in REFUSED:
        assert not re.search(pattern, text), f"{what} in {path.name}"
