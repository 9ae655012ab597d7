import json
import re
from collections.abc import Callable
from datetime import datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import quota, retention, selectors, services, traces
from feedback.forms import RunFilterForm
from feedback.models import Run, ToolConfirmation
from feedback.selectors import run_listing

from . import conditional
from .confirmations import with_arguments_shown

RUNS_PER_PAGE = 50
ADVANCED_FILTERS = ("score_min", "score_max", "tool", "error", "strategy", "since", "until")
TEMPLATE = "feedback/run_detail.html"
# The run list's one poll: this often while a row of the page is active, else this often while the
# first page (newest first) waits for new runs.
ROWS_POLL = "2s"
NEWER_POLL = "5s"
# A row the list's poll watches: "id.status.steps" (ids within a bigint).
WATCHED_ROW = re.compile(r"(\d{1,18})\.(\w{1,32})\.(\d{1,9})", re.ASCII)


def evaluation_context(request: HttpRequest, run: Run) -> dict:
    # Imported late: the evaluation views import this module for _visible_run.
    from .evaluation import evaluation_context

    return evaluation_context(request, run)


def recently_ended(finished_at: datetime | None) -> bool:
    # Imported late, as evaluation_context.
    from .evaluation import recently_ended

    return recently_ended(finished_at)


def _visible_run(request: HttpRequest, run_id: int) -> Run:
    run = _run(run_id)
    if not selectors.run_visible_to(request.user, owner_id=run.task.created_by_id):
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


def _row_state(run: Run) -> tuple:
    """What a row of the list shows that may change (the task's text and kind never do)."""
    return run.pk, run.status, run.outcome, run.step_count, run.score


def run_list(request: HttpRequest) -> HttpResponse:
    form, filters = _list_filters(request)
    runs = selectors.filter_runs(selectors.run_rows(request.user), filters)
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
    newer_than = None
    if sort == "newest" and not (request.GET.get("after") or request.GET.get("before")):
        # New runs land above the first page of the newest first: it says when there are some.
        newer_than = selectors.run_cursor(page.runs[0]) if page.runs else selectors.BEFORE_ALL_RUNS
    context = {
        "form": form,
        "page": page,
        "filtered": any(v not in (None, "") for k, v in filters.items() if k != "sort"),
        # The less used filters fold away unless one of them is set (or wrong).
        "advanced": any(filters.get(k) not in (None, "") for k in ADVANCED_FILTERS) or bool(form.errors),
        "first_url": _href(query),
        "next_url": _href(query, after=page.next_cursor) if page.next_cursor else "",
        "previous_url": _href(query, before=page.previous_cursor) if page.previous_cursor else "",
        "poll": _list_poll(query, page.runs, newer_than=newer_than),
        "newer": _newer(query, 0),
    }
    # The page's rows and where its neighbours start: the URL says the rest.
    state = [_row_state(run) for run in page.runs], page.next_cursor, page.previous_cursor
    return conditional.answer(request, state, lambda: render(request, template, context))


def run_list_poll(request: HttpRequest) -> HttpResponse:
    """The run list's one poll (the page's active rows are ``watch``: each one's id, status and step
    count as shown): the watched rows that changed, out of band, and with ``newer_than`` how many
    runs the list's filters now have above the first page. 304 while none of it has changed."""
    _form, filters = _list_filters(request)
    watched = _watched(request.GET.get("watch", ""))
    rows = {}
    if watched:
        # Not through the filters: a row that stops matching them (its status) still shows its end.
        # Not through the filters: a row that stops matching them (its status) still shows its end.
        rows = {run.pk: run for run in selectors.run_rows(request.user).filter(pk__in=watched)}
    newer = None
    if "newer_than" in request.GET:
        runs = selectors.filter_runs(selectors.run_list(request.user), filters)
        newer = selectors.newer_runs(runs, than=request.GET["newer_than"])
    state = [_row_state(rows[pk]) for pk in watched if pk in rows], newer
    return conditional.answer(request, state, lambda: _list_poll_answer(request, watched, rows, newer))


def _list_poll_answer(request: HttpRequest, watched: dict, rows: dict[int, Run], newer: int | None) -> HttpResponse:
    query = request.GET.copy()
    for name in ("watch", "newer_than"):
        query.pop(name, None)
    still = [rows[pk] for pk in watched if pk in rows and rows[pk].is_active]
    context = {
        "poll": _list_poll(query, still, newer_than=request.GET.get("newer_than")),
        "newer": _newer(query, newer or 0),
        "changed": [rows[pk] for pk in watched if pk in rows and watched[pk] != (rows[pk].status, rows[pk].step_count)],
        "oob": True,
    }
    return render(request, "feedback/run_list.html#run-poll-answer", context)


def _watched(text: str) -> dict[int, tuple[str, int]]:
    """``watch``'s rows by id: "id.status.steps,…" (a malformed entry is left out; a page's worth
    at most)."""
    watched = {}
    for entry in text.split(",")[:RUNS_PER_PAGE]:
        if found := WATCHED_ROW.fullmatch(entry):
            watched[int(found[1])] = (found[2], int(found[3]))
    return watched


def _list_poll(query: QueryDict, runs: list[Run], *, newer_than: str | None) -> dict | None:
    """The list's poller: it watches ``runs``' active rows, and with ``newer_than`` (the first page,
    newest first) counts the runs above it; None once there is nothing to watch."""
    watch = ",".join(f"{run.pk}.{run.status}.{run.step_count}" for run in runs if run.is_active)
    if not watch and newer_than is None:
        return None
    values = {"watch": watch} if watch else {}
    if newer_than is not None:
        values["newer_than"] = newer_than
    return {
        "url": reverse("feedback-run-list-poll") + _href(query, **values),
        "every": ROWS_POLL if watch else NEWER_POLL,
    }


def _newer(query: QueryDict, count: int) -> dict:
    return {
        "count": count,
        "more": count > run_listing.NEWER_RUNS_SHOWN,
        "shown": min(count, run_listing.NEWER_RUNS_SHOWN),
        # The list itself shows them.
        "show_url": _href(query),
    }


def _href(query: QueryDict, **values: str) -> str:
    """A link to the run list with ``query``'s filters, plus ``values``."""
    query = query.copy()
    for key, value in values.items():
        query[key] = value
    return f"?{query.urlencode()}" if query else "?"


def _run_state(request: HttpRequest, run_id: int) -> dict:
    """The run's state (``selectors.run_state``: every part of its page changes only with it),
    once the reader may see the run."""
    state = selectors.run_state(run_id)
    if state is None:
        raise Http404
    if not selectors.run_visible_to(request.user, owner_id=state["owner"]):
        raise PermissionDenied
    # Whether its evaluation is still awaited moves with the clock, once: EVALUATION_WAIT_SECONDS
    # after its end.
    state["awaiting_evaluation"] = not state["evaluations_listed"] and recently_ended(state["finished_at"])
    return state


def _run(run_id: int) -> Run:
    return get_object_or_404(Run.objects.select_related("task", "task__created_by", "parent"), pk=run_id)


def answer(
    request: HttpRequest, run_id: int, render_part: Callable[[HttpRequest, Run, dict], HttpResponse]
) -> HttpResponse:
    """``render_part(request, run, state)``, or a 304 while the run's state (read first, in one
    small query) is the one of the answer the browser holds."""
    state = _run_state(request, run_id)
    return conditional.answer(request, state, lambda: render_part(request, _run(run_id), state))


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return answer(request, run_id, _run_page)


def _run_page(request: HttpRequest, run: Run, state: dict) -> HttpResponse:
    context = {
        **_summary_context(request, run, trace=traces.trace_page(run), state=state),
        **evaluation_context(request, run),
        "problems": traces.trace_problems(run),
        "applied_strategies": selectors.run_applied_strategies(run),
        "children": _children(run, state),
        "sandbox": retention.sandbox_state(run),
    }
    return render(request, TEMPLATE, context)


def run_summary(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's summary, which polls itself while the run is live and its trace's live tail is not
    loaded yet (the tail polls once it is); ``seen``: the status the page shows."""
    return answer(request, run_id, _summary)


def _summary(request: HttpRequest, run: Run, state: dict) -> HttpResponse:
    context = {**_summary_context(request, run, trace=None, state=state), **_news(request, run)}
    return render(request, TEMPLATE + "#summary-poll", context)


def run_steps(request: HttpRequest, run_id: int) -> HttpResponse:
    """The steps after ``after`` (a page of them) for the loader at the trace's end and, while the
    run is live, its tail's poll (``seen``: the status the page shows), with the summary, the
    waterfall's scale, the sub-agent runs and, once the run has ended, its evaluation out of band."""
    return answer(request, run_id, _steps)


def _steps(request: HttpRequest, run: Run, state: dict) -> HttpResponse:
    # The run was read before its steps, so an ended run's last steps are all in this page.
    trace = traces.trace_page(run, after=_int(request.GET.get("after", "")))
    context = {
        **_summary_context(request, run, trace=trace, state=state),
        **_news(request, run),
        "oob": True,
        "children": _children(run, state),
    }
    return render(request, TEMPLATE + "#trace-more", context)


def run_child(request: HttpRequest, run_id: int) -> HttpResponse:
    """A sub-agent run expanded in place in its parent's trace: its summary and first page of steps,
    as they are (the page's one poller is its parent's; the child's own page follows it live)."""
    return answer(request, run_id, _child)


def _child(request: HttpRequest, run: Run, state: dict) -> HttpResponse:
    context = {
        **_summary_context(request, run, trace=traces.trace_page(run), state=state, nested=True),
        "problems": traces.trace_problems(run),
    }
    return render(request, TEMPLATE + "#run-child", context)


def _news(request: HttpRequest, run: Run) -> dict:
    """What a live part's poll says beyond itself: the status, when it is not the one the page
    shows (``seen``), to the screen reader's announce region; and once the run has ended, its
    evaluation section, which polls from then on while the evaluation is awaited."""
    seen = request.GET.get("seen", "")
    ended = seen in Run.ACTIVE_STATUSES and not run.is_active
    return {"seen": seen, "ended_now": ended, **(evaluation_context(request, run) if ended else {})}


def _children(run: Run, state: dict) -> list[Run]:
    """The run's sub-agent runs (read only when its state says it has some)."""
    return list(run.children.select_related("task").order_by("id")) if state["children_listed"] else []


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _summary_context(
    request: HttpRequest, run: Run, *, trace: traces.TracePage | None, state: dict, nested: bool = False
) -> dict:
    confirmations = []
    if state["confirmations_listed"]:
        rows = run.confirmations.select_related("decided_by").order_by("requested_at")
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
    clock: the page holds what they are computed from instead (its start, its waits, in ms since
    the epoch), and static/js/live.js shows them and moves them every second, so the page itself
    does not change with the clock and can be answered 304; without JavaScript they read "—"."""
    waits = [(c.requested_at, c.decided_at) for c in confirmations]
    timing = {"waits_shown": bool(waits), "elapsed": "—", "waited": "—", "span": None, "clock": None}
    if run.finished_at is None:
        timing["span_from"] = _ms(run.started_at or run.created_at)
        if run.started_at is not None:
            shown_waits = [[_ms(asked), _ms(decided) if decided else None] for asked, decided in waits]
            timing["clock"] = {"started": _ms(run.started_at), "waits": json.dumps(shown_waits)}
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
