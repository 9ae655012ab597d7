from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache


@login_not_required
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """For load balancers and process managers: the web process answers. It touches neither the
    database nor the cache on purpose, so it is also the constant page the dashboard benchmark
    measures the other pages against."""
    return HttpResponse("ok\n", content_type="text/plain")
