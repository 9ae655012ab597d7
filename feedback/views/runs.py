from datetime import datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import pagecache, selectors, services
from feedback.forms import RunFilterForm
from feedback.models import Run

RUNS_PER_PAGE = 50
ADVANCED_FILTERS = ("score_min", "score_max", "tool", "error", "strategy", "since", "until")


def evaluation_context(request: HttpRequest, run: Run) -> dict:
    # Imported late: the evaluation views import this module for _visible_run.
    from .evaluation import evaluation_context

    return evaluation_context(request, run)


def _visible_run(request: HttpRequest, run_id: int) -> Run:
    run = get_object_or_404(Run.objects.select_related("task", "task__created_by", "parent"), pk=run_id)
    if not selectors.runs_visible_to(request.user).filter(pk=run.pk).exists():
        raise PermissionDenied
    return run


@pagecache.cached_page
def run_list(request: HttpRequest) -> HttpResponse:
    if not (request.user.has_perm("feedback.view_run") or request.user.has_perm("feedback.add_task")):
        raise PermissionDenied
    form = RunFilterForm(request.GET or None)
    # An invalid filter is shown with its message and ignored; the valid ones still apply.
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    if form.is_bound and not form.is_valid():
        filters = {k: v for k, v in form.cleaned_data.items() if k not in form.errors}
    runs = selectors.filter_runs(selectors.run_list(request.user), filters)
    if request.htmx and "newer_than" in request.GET:
        # The first page's poll: how many runs arrived since it was shown.
        count = selectors.newer_runs(runs, than=request.GET["newer_than"])
        return render(request, "feedback/run_list.html#new-runs", {"newer": _newer(request, count)})
    sort = filters.get("sort") or "newest"
    page = selectors.run_page(
        runs, sort=sort, cursor=request.GET.get("after", ""), before=request.GET.get("before", ""), size=RUNS_PER_PAGE
    )
    template = "feedback/run_list.html"
    if request.htmx:
        template += "#run-table"
    # The next page's link keeps every filter: the URL is the whole state of the list.
    query = request.GET.copy()
    query.pop("after", None)
    query.pop("before", None)
    context = {
        "form": form,
        "page": page,
        "filtered": any(v not in (None, "") for k, v in filters.items() if k != "sort"),
        # The less used filters fold away unless one of them is set (or wrong).
        "advanced": any(filters.get(k) not in (None, "") for k in ADVANCED_FILTERS) or bool(form.errors),
        "first_url": f"?{query.urlencode()}" if query else "?",
        "next_url": f"?{_with(query, after=page.next_cursor)}" if page.next_cursor else "",
        "previous_url": f"?{_with(query, before=page.previous_cursor)}" if page.previous_cursor else "",
    }
    if sort == "newest" and not (request.GET.get("after") or request.GET.get("before")):
        # New runs land above the first page of the newest first: it says when there are some.
        first = selectors.run_cursor(page.runs[0]) if page.runs else selectors.BEFORE_ALL_RUNS
        context["newer"] = _newer(request, 0, poll=f"?{_with(query, newer_than=first)}")
    return render(request, template, context)


def _newer(request: HttpRequest, count: int, *, poll: str = "") -> dict:
    return {
        "count": count,
        "more": count > selectors.NEWER_RUNS_SHOWN,
        "shown": min(count, selectors.NEWER_RUNS_SHOWN),
        # The poll keeps asking with the same question; the list's own URL shows them.
        "poll": poll or request.get_full_path(),
        "show_url": _without(request.GET, "newer_than"),
    }


def _without(query: QueryDict, name: str) -> str:
    query = query.copy()
    query.pop(name, None)
    return f"?{query.urlencode()}" if query else "?"


def _with(query: QueryDict, **values: str) -> str:
    query = query.copy()
    for key, value in values.items():
        query[key] = value
    return query.urlencode()


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    # What the page shows changes with these columns: a new step, status, cancel request or
    # score is a new cache entry, so it shows at once. Read first, in one small query, so that a
    # page served from the cache costs no more (who may see the run is checked when it renders:
    # an entry is one user's, and a change of anyone's rights goes through a POST).
    state = (
        Run.objects.filter(pk=run_id)
        .values_list("status", "step_count", "cancel_requested", "score", "finished_at")
        .first()
    )
    if state is None:
        raise Http404
    live = _live(status=state[0], finished_at=state[4])
    return pagecache.cached(
        request,
        "run-detail",
        lambda: _run_detail(request, _visible_run(request, run_id)),
        vary=state,
        seconds=pagecache.LIVE_PAGE_CACHE_SECONDS if live else None,
    )


def _live(*, status: str, finished_at: datetime | None) -> bool:
    """Whether the run's page changes by the second (its waterfall's scale, its duration): the
    run goes on, or it ended a moment ago and its evaluation may be on its way."""
    from .evaluation import recently_ended

    return status in Run.ACTIVE_STATUSES or finished_at is None or recently_ended(finished_at)


def _run_detail(request: HttpRequest, run: Run) -> HttpResponse:
    template = "feedback/run_detail.html"
    part = request.GET.get("part", "")
    if request.htmx and part == "evaluations":
        # The evaluation section polls on its own: it may still be waiting after the run ended.
        return render(request, template + "#run-evaluations", evaluation_context(request, run))
    if request.htmx and part == "row":
        return render(request, "feedback/run_list.html#run-row", {"run": run})
    nested = request.GET.get("nested") == "1"
    if request.htmx and "after" in request.GET:
        # The trace's tail: the steps after the last one shown, plus the summary out of band.
        # The run was read before its steps, so an ended run's last steps are all in this page.
        trace = selectors.trace_page(run, after=_int(request.GET["after"]))
        context = {**_summary_context(request, run, nested=nested, trace=trace), "oob": True}
        context["seen"] = request.GET.get("seen", "")
        return render(request, template + "#trace-more", context)
    if request.htmx and part != "child":
        # The summary polling itself (while the trace's tail is not the live poller).
        context = _summary_context(request, run, nested=nested, trace=None)
        return render(request, template + "#run-summary", context)
    trace = selectors.trace_page(run)
    context = {
        **_summary_context(request, run, nested=nested or part == "child", trace=trace),
        "problems": selectors.trace_problems(run),
    }
    if request.htmx:
        # A sub-agent run expanded in place inside its parent's trace.
        return render(request, template + "#run-child", context)
    context["applied_strategies"] = selectors.run_applied_strategies(run)
    return render(request, template, {**context, **evaluation_context(request, run)})


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _summary_context(request: HttpRequest, run: Run, *, nested: bool, trace: selectors.TracePage | None) -> dict:
    return {
        "run": run,
        "nested": nested,
        "trace": trace,
        # One poller at a time: the trace's tail polls (and updates the summary out of band)
        # once it has caught up; until then, or without a trace, the summary polls itself.
        "summary_polls": run.is_active and (trace is None or trace.has_more),
        "confirmations": run.confirmations.select_related("decided_by").order_by("requested_at"),
        "can_control": services.run_can_control(run=run, user=request.user),
    }


@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if services.run_cancel(run=run, user=request.user):
        messages.success(request, _("Run #%(id)s will stop.") % {"id": run.pk})
    else:
        messages.info(request, _("Run #%(id)s had already ended.") % {"id": run.pk})
    return redirect("feedback-run-detail", run_id=run.pk)


@require_POST
def run_rerun(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if not request.user.has_perm("feedback.add_task"):
        raise PermissionDenied
    new_run = services.run_rerun(run=run, user=request.user)
    messages.success(request, _("Run #%(id)s is queued.") % {"id": new_run.pk})
    return redirect("feedback-run-detail", run_id=new_run.pk)
