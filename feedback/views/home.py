from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


def home(request: HttpRequest) -> HttpResponse:
    if request.user.has_perm("feedback.view_run") or not request.user.has_perm("feedback.add_task"):
        return redirect("feedback-run-list")
    return redirect("feedback-task-submit")
