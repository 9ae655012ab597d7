"""The site's own middleware: pages for refused requests, and htmx requests whose session ended."""

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import middleware as auth_middleware
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render, resolve_url
from django_htmx.http import HttpResponseClientRedirect


class MethodNotAllowedPageMiddleware:
    """``require_POST`` and its kind answer an empty ``HttpResponseNotAllowed``, which has no
    template of its own (unlike 403, 404 and 500): here it gets 405.html, in the site's layout,
    with its status and its Allow header kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if isinstance(response, HttpResponseNotAllowed) and not response.content:
            allowed = response["Allow"]
            response = render(request, "405.html", {"allowed": allowed}, status=405)
            response["Allow"] = allowed
        return response


class LoginRequiredMiddleware(auth_middleware.LoginRequiredMiddleware):
    """Django's, except for htmx: a fragment request whose session has ended (a poll, a button)
    would get the login page swapped into the fragment. It gets HX-Redirect instead, so the browser
    goes to the login page as a whole, with ``next`` the page it was on (HX-Current-URL), not the
    fragment's URL."""

    def handle_no_permission(self, request: HttpRequest, view_func) -> HttpResponse:
        htmx = getattr(request, "htmx", None)
        if not htmx:
            return super().handle_no_permission(request, view_func)
        # Only a page of this site (current_url_abs_path is None for any other origin).
        page = htmx.current_url_abs_path or resolve_url(settings.LOGIN_REDIRECT_URL)
        login_url = resolve_url(self.get_login_url(view_func))
        return HttpResponseClientRedirect(
            redirect_to_login(page, login_url, self.get_redirect_field_name(view_func)).url
        )
