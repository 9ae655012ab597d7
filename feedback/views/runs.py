import functools
from datetime import UTC, datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import pagecache, selectors, services, traces
from feedback.forms import RunFilterForm
from feedback.models import Run, Step, ToolConfirmation

from .confirmations import with_arguments_shown

RUNS_PER_PAGE = 50
ADVANCED_FILTERS = ("score_min", "score_max", "tool", "error", "strategy", "since", "until")


def evaluation_context(request: HttpRequest, run: Run) -> dict:
    # Imported late: the evaluation views import this module for _visible_run.
    from .evaluation import evaluation_context

    return evaluation_context(request, run)


def recently_ended(finished_at: datetime | None) -> bool:
    # Imported late, as evaluation_context.
    from .evaluation import recently_ended

    return recently_ended(finished_at)


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
        "first_url": _href(query),
        "next_url": _href(query, after=page.next_cursor) if page.next_cursor else "",
        "previous_url": _href(query, before=page.previous_cursor) if page.previous_cursor else "",
    }
    if sort == "newest" and not (request.GET.get("after") or request.GET.get("before")):
        # New runs land above the first page of the newest first: it says when there are some.
        first = selectors.run_cursor(page.runs[0]) if page.runs else selectors.BEFORE_ALL_RUNS
        context["newer"] = _newer(request, 0, poll=_href(query, newer_than=first))
    return render(request, template, context)


def _newer(request: HttpRequest, count: int, *, poll: str = "") -> dict:
    return {
        "count": count,
        "more": count > selectors.NEWER_RUNS_SHOWN,
        "shown": min(count, selectors.NEWER_RUNS_SHOWN),
        # The poll keeps asking with the same question; the list's own URL shows them.
        "poll": poll or request.get_full_path(),
        "show_url": _href(request.GET, drop="newer_than"),
    }


def _href(query: QueryDict, *, drop: str = "", **values: str) -> str:
    """A link to the run list with ``query``'s filters, less ``drop``, plus ``values``."""
    query = query.copy()
    query.pop(drop, None)
    for key, value in values.items():
        query[key] = value
    return f"?{query.urlencode()}" if query else "?"


# What the run's page changes with: a change of any of it is a new page cache entry, so it shows
# at once. First the index of the run's last step (read from the unique (run, index) index: the
# run row's counters follow the steps up to a second later, and its tokens come with them); the
# final answer and the error come with the status; the plan's update comes just before its step,
# but a plan item marked failed just after one; llm_backend is written when the run starts, after
# its model, prompt, tools and strategies. The times make the elapsed time and the waterfall.
RUN_STATE = (
    "status", "step_count", "cancel_requested", "score", "outcome", "plan", "llm_backend",
    "created_at", "started_at", "finished_at",
)  # fmt: skip


@functools.cache
def _run_state_sql() -> str:
    # Read on every request, from the cache or not: the ORM's SQL is built once, as building it
    # cost more than the rest of a page served from the cache. Whether the run ever asked a
    # person comes with it: only then does its clock need the confirmations' times.
    last_step = Step.objects.filter(run=OuterRef("pk")).order_by("-index").values("index")[:1]
    # (A subquery of an id, not EXISTS: that would add a parameter to the SQL kept here.)
    asked = ToolConfirmation.objects.filter(run=OuterRef("pk")).values("pk")[:1]
    runs = Run.objects.filter(pk=0).annotate(last_step=Subquery(last_step), asked=Subquery(asked))
    sql, _params = runs.values_list("last_step", "asked", *RUN_STATE).query.sql_with_params()
    return sql


def _run_state(run_id: int) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(_run_state_sql(), [run_id])
        row = cursor.fetchone()
    if row is None:
        return None
    # SQLite hands back naive UTC times (PostgreSQL aware ones), as the ORM's converters would fix.
    last_step, asked, *columns, created_at, started_at, finished_at = row
    times = (_aware(moment) for moment in (created_at, started_at, finished_at))
    return (last_step, asked is not None, *columns, *times)


def _aware(moment: datetime | str | None) -> datetime | None:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return timezone.make_aware(moment, UTC) if moment is not None and timezone.is_naive(moment) else moment


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    # The state is read first, in one small query, so that a page served from the cache costs no
    # more (who may see the run is checked when it renders: an entry is one user's, and a change
    # of anyone's rights goes through a POST).
    state = _run_state(run_id)
    if state is None:
        raise Http404
    last_step, asked, created_at, started_at, finished_at = state[0], state[1], *state[-3:]
    # While the run has not ended its elapsed time and its waterfall's scale move with the clock:
    # the page holds placeholders, and every response, cached or not, gets the values of now.
    clock = {}
    if not finished_at:
        waits = traces.run_waits(run_id) if asked else None
        clock = _timing(run_id, created_at=created_at, started_at=started_at, finished_at=None, waits=waits)
    return pagecache.cached(
        request,
        "run-detail",
        lambda: _run_detail(request, _counted(_visible_run(request, run_id), last_step), clock),
        vary=state,
        # An ended run's page changes without its state while its evaluation may still arrive.
        seconds=pagecache.RECENTLY_ENDED_PAGE_CACHE_SECONDS if recently_ended(finished_at) else None,
        fill=clock,
    )


def _counted(run: Run, last_step: int | None) -> Run:
    """``run`` with its step count as its steps have it (its row's follows them within a second)."""
    if last_step is not None:
        run.step_count = max(run.step_count, last_step + 1)
    return run


def _timing(
    run_id: int,
    *,
    created_at: datetime,
    started_at: datetime | None,
    finished_at: datetime | None,
    waits: list[traces.Wait] | None,
) -> dict[str, str]:
    """The run's working time and, when it asked people (``waits``, its confirmations), the time
    it waited for them (once it has started), and its waterfall's span (wall time: the steps lie
    where they ran), by placeholder name, as the page shows them (in the active language, as the
    floatformat filter would)."""
    span = traces.trace_span_ms(created_at=created_at, started_at=started_at, finished_at=finished_at)
    timing = {f"run-{run_id}-span": str(span)}
    if started_at is not None:
        end = finished_at or timezone.now()
        working, waited = traces.working_and_waited_seconds(started_at=started_at, end=end, waits=waits or [])
        timing[f"run-{run_id}-elapsed"] = floatformat(working, 1)
        if waits:
            timing[f"run-{run_id}-waited"] = floatformat(waited, 1)
    return timing


def _timing_context(run: Run, clock: dict[str, str], confirmations: list[ToolConfirmation]) -> dict:
    """The working time, the time waited for people and the span for the template: the
    placeholders ``clock`` has values for (a live run's), the values themselves otherwise."""
    waits = [(c.requested_at, c.decided_at) for c in confirmations]
    timing = _timing(
        run.pk, created_at=run.created_at, started_at=run.started_at, finished_at=run.finished_at, waits=waits
    )

    def shown(name: str) -> str | None:
        key = f"run-{run.pk}-{name}"
        return pagecache.placeholder(key) if key in clock else timing.get(key)

    return {"elapsed": shown("elapsed"), "waited": shown("waited"), "span": shown("span")}


def _run_detail(request: HttpRequest, run: Run, clock: dict[str, str]) -> HttpResponse:
    template = "feedback/run_detail.html"
    part = request.GET.get("part", "")
    if request.htmx and part == "evaluations":
        # The evaluation section polls on its own: it may still be waiting after the run ended.
        return render(request, template + "#run-evaluations", evaluation_context(request, run))
    if request.htmx and part == "row":
        return render(request, "feedback/run_list.html#run-row", {"run": run})
    nested = request.GET.get("nested") == "1"
    summary = {"nested": nested or part == "child", "clock": clock}
    if request.htmx and "after" in request.GET:
        # The trace's tail: the steps after the last one shown, plus the summary and the
        # waterfall's scale out of band. The run was read before its steps, so an ended run's
        # last steps are all in this page.
        trace = traces.trace_page(run, after=_int(request.GET["after"]))
        context = {**_summary_context(request, run, trace=trace, **summary), "oob": True}
        context["seen"] = request.GET.get("seen", "")
        return render(request, template + "#trace-more", context)
    if request.htmx and part != "child":
        # The summary polling itself (while the trace's tail is not the live poller).
        context = _summary_context(request, run, trace=None, **summary)
        return render(request, template + "#run-summary", context)
    trace = traces.trace_page(run)
    context = {**_summary_context(request, run, trace=trace, **summary), "problems": traces.trace_problems(run)}
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


def _summary_context(
    request: HttpRequest, run: Run, *, nested: bool, trace: traces.TracePage | None, clock: dict[str, str]
) -> dict:
    confirmations = with_arguments_shown(
        run.confirmations.select_related("decided_by").order_by("requested_at"), user=request.user
    )
    return {
        "run": run,
        "nested": nested,
        "trace": trace,
        # One poller at a time: the trace's tail polls (and updates the summary out of band)
        # once it has caught up; until then, or without a trace, the summary polls itself.
        "summary_polls": run.is_active and (trace is None or trace.has_more),
        "confirmations": confirmations,
        "can_control": services.run_can_control(run=run, user=request.user),
        **_timing_context(run, clock, confirmations),
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
