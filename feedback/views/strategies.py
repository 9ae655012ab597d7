from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from feedback import selectors
from feedback.models import Strategy


@permission_required("feedback.view_strategy", raise_exception=True)
def strategy_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    status = status if status in Strategy.Status.values else ""
    context = {
        "strategies": selectors.strategy_list(status=status),
        "status": status,
        "statuses": Strategy.Status.choices,
    }
    return render(request, "feedback/strategy_list.html", context)
