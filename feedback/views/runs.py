import json
from collections.abc import Callable
from datetime import datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, F, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from feedback import quota, retention, selectors, services, traces
from feedback.forms import RunFilterForm
from feedback.models import DatasetItem, Run, Step, ToolConfirmation
from feedback.models.step import STEP_WENT_WRONG

from .confirmations import with_arguments_shown

RUNS_PER_PAGE = 50
ADVANCED_FILTERS = ("score_min", "score_max", "tool", "error", "strategy", "since", "until")
TEMPLATE = "feedback/run_detail.html"
# The run list's table polls itself this often while a row of the page is active, else this often
# while the first page (newest first) waits for new runs.
ROWS_POLL = "2s"
NEWER_POLL = "5s"


def evaluation_context(request: HttpRequest, run: Run) -> dict:
    # Imported late: the evaluation views import this module for _visible_run.
    from .evaluation import evaluation_context

    return evaluation_context(request, run)


def recently_ended(finished_at: datetime | None) -> bool:
    # Imported late, as evaluation_context.
    from .evaluation import recently_ended

    return recently_ended(finished_at)


# Whether the run asked people to confirm a call, and whether a step went wrong: most runs did
# neither, and their summary then reads no confirmations and no problems (two queries of a poll's
# six, for two EXISTS in the run's own query).
_FLAGS = {
    "has_confirmations": Exists(ToolConfirmation.objects.filter(run=OuterRef("pk"))),
    "has_problems": Exists(Step.objects.filter(STEP_WENT_WRONG, run=OuterRef("pk"))),
}
# A run's page shows its task and who submitted it; a live part polled every second shows nothing
# of the task, and needs only who may see it (Run.owner_id): the joins cost a third of a poll.
PAGE_RUN = Run.objects.select_related("task", "task__created_by").annotate(**_FLAGS)
PART_RUN = Run.objects.annotate(owner_id=F("task__created_by_id"), **_FLAGS)


def _visible_run(request: HttpRequest, run_id: int, runs: QuerySet[Run] = PAGE_RUN) -> Run:
    run = get_object_or_404(runs, pk=run_id)
    if not selectors.run_visible_to(request.user, owner_id=run.owner_id):
        raise PermissionDenied
    return run


def _list_filters(request: HttpRequest) -> tuple[RunFilterForm, dict]:
    if not (request.user.has_perm("feedback.view_run") or request.user.has_perm("feedback.add_task")):
        raise PermissionDenied
    form = RunFilterForm(request.GET or None)
    # An invalid filter is shown with its message and ignored; the valid ones still apply.
    filters = form.cleaned_data if form.is_bound and form.is_valid() else {}
    if form.is_bound and not form.is_valid():
        filters = {k: v for k, v in form.cleaned_data.items() if k not in form.errors}
    return form, filters


def run_list(request: HttpRequest) -> HttpResponse:
    form, filters = _list_filters(request)
    runs = selectors.filter_runs(selectors.run_rows(request.user), filters)
    sort = filters.get("sort") or "newest"
    page = selectors.run_page(
        runs, sort=sort, cursor=request.GET.get("after", ""), before=request.GET.get("before", ""), size=RUNS_PER_PAGE
    )
    # The next page's link keeps every filter: the URL is the whole state of the list.
    query = request.GET.copy()
    query.pop("after", None)
    query.pop("before", None)
    first_newest = sort == "newest" and not (request.GET.get("after") or request.GET.get("before"))
    every = _list_poll_every(page.runs, first_newest=first_newest)
    context = {
        "form": form,
        "page": page,
        "filtered": any(v not in (None, "") for k, v in filters.items() if k != "sort"),
        # The less used filters fold away unless one of them is set (or wrong).
        "advanced": any(filters.get(k) not in (None, "") for k in ADVANCED_FILTERS) or bool(form.errors),
        "can_add_dataset": request.user.has_perm("feedback.add_dataset"),
        "checkers": DatasetItem.Checker.choices,
        "first_url": _href(query),
        "next_url": _href(query, after=page.next_cursor) if page.next_cursor else "",
        "previous_url": _href(query, before=page.previous_cursor) if page.previous_cursor else "",
        # The table polls its own URL (this page of the list, as it is asked) while it may change.
        "poll": {"url": request.get_full_path(), "every": every} if every else None,
    }
    if not request.htmx:
        return render(request, "feedback/run_list.html", context)
    response = render(request, "feedback/run_list.html#run-table", context)
    if every is None:
        # Nothing on this page will change: the table's poll (if it asked) stops.
        response.status_code = HttpResponseStopPolling.status_code
    return response


def _list_poll_every(runs: list[Run], *, first_newest: bool) -> str | None:
    """How often the list's table polls: often while a row of it is active, less often while the
    first page of the newest first waits for new runs (they come in above), never otherwise."""
    if any(run.is_active for run in runs):
        return ROWS_POLL
    return NEWER_POLL if first_newest else None


def _href(query: QueryDict, **values: str) -> str:
    """A link to the run list with ``query``'s filters, plus ``values``."""
    query = query.copy()
    for key, value in values.items():
        query[key] = value
    return f"?{query.urlencode()}" if query else "?"


def settled(run: Run) -> bool:
    """Whether nothing more will change on the run's page: it has ended and its scores and outcome
    are final (its first round of evaluations is written, in one transaction, or none is coming)."""
    return not run.is_active and not evaluation_awaited(run)


def evaluation_awaited(run: Run) -> bool:
    """An ended run's first evaluation round arrives after its end (the chain is queued then)."""
    # The clock first: a run that ended long ago needs no query.
    return recently_ended(run.finished_at) and not run.evaluations.exists()


def answer(
    request: HttpRequest,
    run_id: int,
    render_part: Callable[[HttpRequest, Run], HttpResponse],
    runs: QuerySet[Run] = PAGE_RUN,
) -> HttpResponse:
    """``render_part(request, run)`` once the reader may see the run (read from ``runs``: PART_RUN
    for a part that shows nothing of the task). A part asked by htmx of a settled run comes with
    286 (django-htmx's HttpResponseStopPolling): htmx swaps it in and stops the poll that asked, so
    an ended page stops asking."""
    run = _visible_run(request, run_id, runs)
    response = render_part(request, run)
    if request.htmx and response.status_code == 200 and settled(run):
        response.status_code = HttpResponseStopPolling.status_code
    return response


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return answer(request, run_id, _run_page)


def _run_page(request: HttpRequest, run: Run) -> HttpResponse:
    matching = traces.trace_filter(request.GET)
    trace = traces.trace_page(run, matching=matching)
    context = {
        **_summary_context(request, run, trace=trace),
        "trace_filter": matching,
        **evaluation_context(request, run),
        "problems": _problems(run, trace),
        "applied_strategies": selectors.run_applied_strategies(run),
        "children": _children(run),
        "sandbox": retention.sandbox_state(run),
    }
    # The trace's filter form asks the page's own URL (so the address keeps the filter) for the
    # trace's body alone; any other request of this URL gets the whole page.
    template = TEMPLATE
    if request.htmx and request.htmx.target == f"trace-body-{run.pk}":
        template += "#trace-body"
    return render(request, template, context)


def run_summary(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's summary, which polls itself while the run is live and its trace's live tail is not
    loaded yet (the tail polls once it is); ``seen``: the status the page shows."""
    return answer(request, run_id, _summary, PART_RUN)


def _summary(request: HttpRequest, run: Run) -> HttpResponse:
    context = {**_summary_context(request, run, trace=None), **_news(request, run)}
    return render(request, TEMPLATE + "#summary-poll", context)


def run_steps(request: HttpRequest, run_id: int) -> HttpResponse:
    """The steps after ``after`` (a page of them) for the loader at the trace's end and, while the
    run is live, its tail's poll (``seen``: the status the page shows), with the summary, the
    waterfall's scale, the sub-agent runs and, once the run has ended, its evaluation out of band."""
    return answer(request, run_id, _steps, PART_RUN)


def _steps(request: HttpRequest, run: Run) -> HttpResponse:
    # The run was read before its steps, so an ended run's last steps are all in this page.
    matching = traces.trace_filter(request.GET)
    trace = traces.trace_page(run, after=_int(request.GET.get("after", "")), matching=matching)
    context = {
        **_summary_context(request, run, trace=trace),
        "trace_filter": matching,
        **_news(request, run),
        "oob": True,
        "children": _children(run),
    }
    return render(request, TEMPLATE + "#trace-more", context)


def run_child(request: HttpRequest, run_id: int) -> HttpResponse:
    """A sub-agent run expanded in place in its parent's trace: its summary and first page of steps,
    as they are (the page's one poller is its parent's; the child's own page follows it live)."""
    return answer(request, run_id, _child)


def _child(request: HttpRequest, run: Run) -> HttpResponse:
    # The whole tree on one time axis, its top-level run's: a child's steps lie where they ran
    # within the parent's, as Langfuse and Phoenix draw nested spans.
    place = traces.run_tree_place(run)
    root = place.root
    origin = root.started_at or root.created_at
    trace = traces.trace_page(run, origin=origin)
    context = {
        **_summary_context(request, run, trace=trace, nested=True),
        "problems": _problems(run, trace),
        # Shown on the nested run, so a reader knows how far down the tree they are.
        "depth": place.depth,
        **_axis(root),
    }
    return render(request, TEMPLATE + "#run-child", context)


def _axis(root: Run) -> dict:
    """A nested trace's scale: its top-level run's span, fixed once that has ended, else growing
    from its start with the clock (live.js), as the top-level trace's own."""
    if root.finished_at is None:
        return {"span": None, "span_from": _ms(root.started_at or root.created_at)}
    span = traces.trace_span_ms(created_at=root.created_at, started_at=root.started_at, finished_at=root.finished_at)
    return {"span": span}


def _news(request: HttpRequest, run: Run) -> dict:
    """What a live part's poll says beyond itself: the status, when it is not the one the page
    shows (``seen``), to the screen reader's announce region; and once the run has ended, its
    evaluation section, which polls from then on while the evaluation is awaited; and the summary
    of the steps that went wrong, which grows with the steps."""
    seen = request.GET.get("seen", "")
    ended = seen in Run.ACTIVE_STATUSES and not run.is_active
    news = {"seen": seen, "ended_now": ended, "problems": _problems(run)}
    return {**news, **(evaluation_context(request, run) if ended else {})}


def _problems(run: Run, trace: traces.TracePage | None = None) -> list:
    return traces.trace_problems(run, page=trace) if run.has_problems else []


def _children(run: Run) -> list[Run]:
    """The run's sub-agent runs, as their list shows them (a link and a status)."""
    return list(run.children.order_by("id").only("id", "status"))


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _summary_context(request: HttpRequest, run: Run, *, trace: traces.TracePage | None, nested: bool = False) -> dict:
    rows = run.confirmations.select_related("decided_by").order_by("requested_at") if run.has_confirmations else []
    confirmations = with_arguments_shown(rows, user=request.user)
    return {
        "run": run,
        "nested": nested,
        "trace": trace,
        # One poller at a time: the trace's tail polls (and updates the summary out of band)
        # once it is loaded; until then the summary polls itself. A sub-agent run expanded in its
        # parent's trace never polls.
        "summary_polls": not nested and run.is_active and (trace is None or trace.has_more),
        "confirmations": confirmations,
        "can_control": services.run_can_control(run=run, user=request.user),
        # The confirmation cards' forms lead back to the run's page, not to the part's URL.
        "next_url": reverse("feedback-run-detail", args=[run.pk]),
        **_timing(run, confirmations),
    }


def _timing(run: Run, confirmations: list[ToolConfirmation]) -> dict:
    """The run's working time, its time waited for people (once it has asked them: from each
    confirmation's request to its decision) and its waterfall's span. An ended run's are numbers
    (in the active language, as the floatformat filter writes them). A live run's move with the
    clock: the page holds what they are computed from instead (its start, its waits and the server's
    clock, in ms since the epoch), and static/js/live.js shows them and moves them every second
    between polls, whatever the reader's own clock says; without JavaScript they read "—"."""
    waits = [(c.requested_at, c.decided_at) for c in confirmations]
    timing = {"waits_shown": bool(waits), "elapsed": "—", "waited": "—", "span": None, "clock": None}
    if run.finished_at is None:
        timing["span_from"] = _ms(run.started_at or run.created_at)
        if run.started_at is not None:
            shown_waits = [[_ms(asked), _ms(decided) if decided else None] for asked, decided in waits]
            timing["clock"] = {
                "started": _ms(run.started_at),
                "waits": json.dumps(shown_waits),
                "now": _ms(timezone.now()),
            }
        return timing
    timing["span"] = traces.trace_span_ms(
        created_at=run.created_at, started_at=run.started_at, finished_at=run.finished_at
    )
    if run.started_at is not None:
        working, waited = traces.working_and_waited_seconds(started_at=run.started_at, end=run.finished_at, waits=waits)
        timing["elapsed"], timing["waited"] = f"{floatformat(working, 1)} s", f"{floatformat(waited, 1)} s"
    return timing


@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if services.run_cancel(run=run, user=request.user):
        run.refresh_from_db(fields=["status"])
        if run.status == Run.Status.CANCELLED:
            messages.success(request, _("Run #%(id)s is cancelled.") % {"id": run.pk})
        else:  # running: its loop stops at its next turn
            messages.success(request, _("Run #%(id)s will stop.") % {"id": run.pk})
    else:
        messages.info(request, _("Run #%(id)s had already ended.") % {"id": run.pk})
    return redirect("feedback-run-detail", run_id=run.pk)


@require_POST
def run_rerun(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if not request.user.has_perm("feedback.add_task"):
        raise PermissionDenied
    try:
        new_run = services.run_rerun(run=run, user=request.user)
    except quota.QuotaExceeded as refused:
        messages.error(request, str(refused))
        return redirect("feedback-run-detail", run_id=run.pk)
    messages.success(request, _("Run #%(id)s is queued.") % {"id": new_run.pk})
    return redirect("feedback-run-detail", run_id=new_run.pk)
