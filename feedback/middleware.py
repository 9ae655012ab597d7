"""The site's own page for a request in a method a view does not take."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render


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
