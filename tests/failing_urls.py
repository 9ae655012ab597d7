"""The site's URLs plus one view that fails, for the server error page's test."""

from django.urls import path

from agentsite.urls import urlpatterns as site


def fail(request):
    raise RuntimeError("a bug in a view")


urlpatterns = [*site, path("fails/", fail)]
