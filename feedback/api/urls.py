"""The JSON API, version 1, under /api/v1/: django-ninja (pydantic schemas, the OpenAPI document
generated from them), with Swagger UI from django-ninja's own static files (no CDN)."""

import functools
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.urls import URLPattern, re_path
from django.utils.cache import patch_cache_control
from django.utils.translation import gettext as _
from django.views.decorators.common import no_append_slash
from django.views.decorators.csp import csp_override
from ninja import NinjaAPI, Swagger

from . import confirmations, datasets, errors, runs, strategies, tasks
from .auth import BearerToken
from .throttles import TokenThrottle, document_limits

DESCRIPTION = """\
Submit tasks, read runs and their traces, score runs, and decide on strategies, as the pages do.

Every request carries `Authorization: Bearer <token>`: make a token on the site's *API tokens* page.
A token acts with its account's permissions (staff submit tasks and see their own runs; operators
read every run, strategy and metric; reviewers also score runs and decide on strategies), and a
read-only token only reads. Errors are JSON `{"detail": ..., "errors": {field: [...]}}`.
"""


class AgentFeedbackApi(NinjaAPI):
    """The API, whose OpenAPI document also states its limits (throttles.document_limits)."""

    def get_openapi_schema(self, **kwargs) -> dict:
        return document_limits(super().get_openapi_schema(**kwargs))


api = AgentFeedbackApi(
    title="Agent feedback API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api-v1",
    auth=BearerToken(),
    # Every endpoint's (API_RATE_LIMIT); a router or an endpoint naming throttles of its own replaces it.
    throttle=TokenThrottle(),
    openapi_url="/openapi.json",
    docs_url="/docs",
    # validatorUrl None: Swagger UI would otherwise send the document to swagger.io for a badge.
    docs=Swagger(settings={"validatorUrl": None, "persistAuthorization": False}),
)
errors.install(api)
api.add_router("", tasks.router)
api.add_router("", runs.router)
api.add_router("", strategies.router)
api.add_router("", confirmations.router)
api.add_router("", datasets.router)


def _api_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """One of the API's views, open without a session (the token is checked instead:
    LoginRequiredMiddleware would send a client to the login page), answering a method it does
    not take in JSON like every other refusal. No answer is stored on the way (``no-store``):
    each is one account's data, or a refusal that must not outlive the request."""

    @login_not_required
    @functools.wraps(view)
    def api_view(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            allowed = response["Allow"]
            response = JsonResponse({"detail": _("Use %(methods)s here.") % {"methods": allowed}}, status=405)
            response["Allow"] = allowed
        patch_cache_control(response, no_store=True)
        return response

    return api_view


@no_append_slash
def _no_such_endpoint(request: HttpRequest, path: str) -> HttpResponse:
    # Django's 404 would be the site's HTML page; a client of the API reads JSON.
    return JsonResponse({"detail": _("Not found.")}, status=404)


def urls() -> tuple[list[URLPattern], str, str]:
    patterns, app_name, namespace = api.urls
    patterns = [*patterns, re_path(r"^(?P<path>.*)$", _no_such_endpoint, name="no-such-endpoint")]
    for pattern in patterns:
        pattern.callback = _api_view(pattern.callback)
        if pattern.name == "openapi-view":
            # Swagger UI's stylesheet draws its icons as data: images; the page stays as strict
            # as the site's otherwise (its scripts and styles are files of this site).
            docs_policy = {**settings.SECURE_CSP, "img-src": [*settings.SECURE_CSP["img-src"], "data:"]}
            pattern.callback = csp_override(docs_policy)(pattern.callback)
    return patterns, app_name, namespace
