"""The site's own middleware: pages for refused requests, htmx requests whose session ended, and
bodies refused before they are read."""

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import middleware as auth_middleware
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import render, resolve_url
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _
from django_htmx.http import HttpResponseClientRedirect

from feedback import uploads


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
            # The refusal was logged when the view answered it: the page is the same refusal.
            response._has_been_logged = True
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


class RequestBodyLimitMiddleware:
    """Refuses, unread, a body the address can never take, before CsrfViewMiddleware reads
    request.POST (which parses the whole body, its files included). It comes after
    LoginRequiredMiddleware, which sends a signed-out person to the login page unread too.

    - Content-Length above what the view takes (``feedback.uploads``: its files plus the fields;
      DATA_UPLOAD_MAX_MEMORY_SIZE for a view that takes no files): 413.
    - A chunked body (no Content-Length): 411. Django under WSGI would read it as empty, and the
      form would answer as if nothing had been sent.

    What it lets through is read by ``feedback.uploads.BoundedMemoryUploadHandler``, which keeps
    no more of it than the view takes, and nothing on disk.

    The API's refusals are JSON, htmx's a short text (static/js/requests.js shows the banner), the
    rest a page in the site's layout."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> HttpResponse | None:
        limits = request.upload_limits = uploads.limits_of(view_func)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # as Django reads it: no body
        if not length and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return _refused(
                request,
                411,
                _(
                    "The request came in chunks, without its length (Content-Length): this server does not "
                    "read such a body, and nothing of it was used. Send it again with its length."
                ),
            )
        limit = limits.body_bytes()
        if limit is not None and length > limit:
            return _too_large(request, limits, length)
        return None


def _too_large(request: HttpRequest, limits: uploads.UploadLimits, length: int) -> HttpResponse:
    detail = _("The request body is too large (%(size)s; this address takes at most %(limit)s): none of it was read.")
    detail %= {"size": _size(length), "limit": _size(limits.body_bytes())}
    if limits.files:
        files = {"files": limits.files, "size": _size(limits.file_bytes)}
        detail += " " + _("Up to %(files)s files of %(size)s each.") % files
    return _refused(request, 413, detail)


def _size(count: int) -> str:
    # "12.5 MB" with a plain space: the text is also JSON and plain text, not only HTML.
    return filesizeformat(count).replace("\xa0", " ")


def _refused(request: HttpRequest, status: int, detail: str) -> HttpResponse:
    if request.path_info.startswith("/api/"):
        # As the API's own refusals (feedback/api/errors.py) are: {"detail": ...}, UTF-8 JSON.
        return JsonResponse({"detail": detail}, status=status, content_type="application/json; charset=utf-8")
    if getattr(request, "htmx", False):
        return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")
    return render(request, "request_refused.html", {"status": status, "detail": detail}, status=status)
