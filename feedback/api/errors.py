"""Every refusal of the API is JSON ``{"detail": "...", "errors": {field: [messages]}}`` (``errors``
only where fields are at fault) with the status that says what happened: 400 the request (field
errors), 401 no usable token, 403 not allowed, 404 no such thing (or not yours to see), 409 the
state changed first (someone else decided), 413 too large, 422 an idempotency key sent with another
request, 429 too many requests (Retry-After); and 500, logged with its traceback, for an exception
nothing expected: a client reading JSON never gets Django's HTML error page."""

import math

from django import forms
from django.core import signals
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.log import log_response
from django.utils.translation import gettext as _
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError

# The header a 401 carries (RFC 6750): how to authenticate.
WWW_AUTHENTICATE = 'Bearer realm="api"'


class ErrorOut(Schema):
    detail: str
    errors: dict[str, list[str]] | None = None


def refusals(*codes: int) -> dict[int, type[ErrorOut]]:
    """The error answers an endpoint documents: those of every endpoint (no usable token, not
    allowed, too many requests) and ``codes``."""
    return dict.fromkeys(sorted({401, 403, 429, *codes}), ErrorOut)


class ApiError(Exception):
    def __init__(
        self, status: int, detail: str, *, errors: dict[str, list[str]] | None = None, headers: dict | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.errors, self.headers = status, detail, errors, headers or {}


def invalid(errors: dict[str, list[str]]) -> ApiError:
    return ApiError(400, _("The request is not valid: see errors."), errors=errors)


def form_invalid(form: forms.Form, names: dict[str, str] | None = None) -> ApiError:
    """The form's errors as a 400 (errors that concern no one field are under ``__all__``), each
    under its field's name in the request (``names``, where it is not the form's)."""
    names = names or {}
    errors = form.errors.get_json_data().items()
    return invalid({names.get(field, field): [e["message"] for e in listed] for field, listed in errors})


def unauthorized(detail: str) -> ApiError:
    return ApiError(401, detail, headers={"WWW-Authenticate": WWW_AUTHENTICATE})


def throttled(seconds: int) -> ApiError:
    return ApiError(
        429,
        _("Too many requests: try again in %(seconds)s s.") % {"seconds": seconds},
        headers={"Retry-After": str(seconds)},
    )


def _field(loc: list | tuple) -> str:
    # ("body", "payload", "files", 0, "name") -> "files.0.name"; ("query", "status") -> "status"
    parts = [str(part) for part in loc[1:]]
    if loc and loc[0] == "body" and len(parts) > 1:
        parts = parts[1:]  # the name of the view's body argument
    return ".".join(parts) or "__all__"


def _respond(api: NinjaAPI, request: HttpRequest, error: ApiError) -> HttpResponse:
    body = {"detail": error.detail}
    if error.errors is not None:
        body["errors"] = error.errors
    response = api.create_response(request, body, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def install(api: NinjaAPI) -> None:
    """Replace django-ninja's default error answers (422 lists, bare "Unauthorized") with ours."""

    def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
        return _respond(api, request, exc)

    def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        errors: dict[str, list[str]] = {}
        for error in exc.errors:
            errors.setdefault(_field(error.get("loc", ())), []).append(error.get("msg", ""))
        return _respond(api, request, invalid(errors))

    def too_many(request: HttpRequest, exc: Throttled) -> HttpResponse:
        # The API's throttles (throttles.py) always say how long: ninja sets Retry-After from it too.
        return _respond(api, request, throttled(math.ceil(exc.wait or 1)))

    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        if isinstance(exc, AuthenticationError):
            return _respond(api, request, unauthorized(_("Send a token: Authorization: Bearer <token>.")))
        if exc.status_code == 400:  # the body is not JSON (django-ninja's own check)
            return _respond(api, request, ApiError(400, _("The request body is not valid JSON.")))
        return _respond(api, request, ApiError(exc.status_code, str(exc)))

    def permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return _respond(api, request, ApiError(403, str(exc) or _("Your account may not do this.")))

    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return _respond(api, request, ApiError(404, _("Not found.")))

    def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return _respond(api, request, ApiError(413, _("The request body is too large.")))

    def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
        # As Django's own 500 is logged and signalled (error trackers listen), in JSON.
        signals.got_request_exception.send(sender=None, request=request)
        detail = _("The server failed to answer this request: the error is logged.")
        response = _respond(api, request, ApiError(500, detail))
        log_response("Internal Server Error: %s", request.path, response=response, request=request, exception=exc)
        return response

    api.add_exception_handler(Exception, unexpected)
    api.add_exception_handler(ApiError, api_error)
    api.add_exception_handler(ValidationError, validation_error)
    api.add_exception_handler(HttpError, http_error)
    api.add_exception_handler(Throttled, too_many)
    api.add_exception_handler(PermissionDenied, permission_denied)
    api.add_exception_handler(Http404, not_found)
    api.add_exception_handler(RequestDataTooBig, too_big)
