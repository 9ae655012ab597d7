"""Runs: the list with the run list page's filters, one run, its trace, and what people do to a run
(score it, run it again, cancel it). Who sees which run is selectors.runs_visible_to's rule:
another person's run is 404 to staff, as if it did not exist."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from ninja import Query, Router, Status

from feedback import quota, selectors, services, traces
from feedback.forms import HumanScoreForm, RunFilterForm
from feedback.forms.review import config_field_name
from feedback.models import Run, ScoreConfig

from .auth import require_perm, require_write, user_of
from .cursors import decode_cursor, encode_cursor
from .errors import ApiError, form_invalid, invalid, refusals
from .outputs import RunListOut, RunOut, RunSummaryOut, ScoreConfigOut, ScoreOut, StepOut, StepPageOut
from .schemas import RunQuery, ScoreIn, StepQuery

router = Router(tags=["runs"])


def _visible_run(request: HttpRequest, run_id: int) -> Run:
    runs = selectors.runs_visible_to(user_of(request)).select_related("task__created_by", "task__workspace")
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise Http404
    return run


def _require_run_reader(request: HttpRequest) -> None:
    user = user_of(request)
    if not (user.has_perm("feedback.view_run") or user.has_perm("feedback.add_task")):
        raise ApiError(403, _("Your account may not do this."))


@router.get("/runs", response={200: RunListOut, **refusals(400)}, summary="List runs")
def list_runs(request: HttpRequest, filters: Query[RunQuery]) -> dict:
    """Newest first unless sorted otherwise; staff see the runs of their own tasks. Pages are keyset:
    pass ``next_cursor`` (or ``previous_cursor``) as ``cursor`` with the same filters and sort."""
    _require_run_reader(request)
    unknown = sorted(set(request.GET) - set(RunQuery.model_fields))
    if unknown:
        raise invalid({name: [_("Unknown parameter.")] for name in unknown})
    data = filters.model_dump(exclude={"cursor", "limit"}, exclude_none=True)
    form = RunFilterForm({key: str(value) for key, value in data.items()})
    if not form.is_valid():
        raise form_invalid(form)
    direction, position = decode_cursor(filters.cursor, order=filters.sort) if filters.cursor else ("", "")
    runs = selectors.filter_runs(selectors.run_list(user_of(request)), form.cleaned_data)
    page = selectors.run_page(
        runs,
        sort=filters.sort,
        cursor=position if direction == "after" else "",
        before=position if direction == "before" else "",
        size=filters.limit,
    )
    return {
        "data": page.runs,
        "next_cursor": encode_cursor(filters.sort, "after", page.next_cursor) if page.next_cursor else None,
        "previous_cursor": (
            encode_cursor(filters.sort, "before", page.previous_cursor) if page.previous_cursor else None
        ),
    }


@router.get("/runs/{run_id}", response={200: RunOut, **refusals(400, 404)}, summary="Read a run")
def read_run(request: HttpRequest, run_id: int) -> Run:
    """Status, outcome, score, answer, error, times, tokens, the exact system prompt, the
    strategies applied (and their trial arm) and every evaluation, newest round first."""
    _require_run_reader(request)
    return _visible_run(request, run_id)


@router.get("/runs/{run_id}/steps", response={200: StepPageOut, **refusals(400, 404)}, summary="Read a run's trace")
def list_steps(request: HttpRequest, run_id: int, page: Query[StepQuery]) -> dict:
    """The trace's steps in order, with the attempts of every call that needed more than one (or
    failed), a page at a time by step index: pass ``next_after`` as ``after`` while ``has_more``.
    A live run's later steps appear after its last one: ask again with the same ``after``."""
    _require_run_reader(request)
    run = _visible_run(request, run_id)
    trace = traces.trace_page(run, after=page.after, limit=page.limit)
    return {
        "run_id": run.pk,
        "run_status": run.status,
        "data": [traces.step_as_dict(step) for step in trace.steps],
        "next_after": trace.last_index,
        "has_more": trace.has_more,
    }


@router.get("/runs/{run_id}/steps/{index}", response={200: StepOut, **refusals(400, 404)}, summary="Read one step")
def read_step(request: HttpRequest, run_id: int, index: int) -> dict:
    _require_run_reader(request)
    run = _visible_run(request, run_id)
    return traces.step_as_dict(get_object_or_404(run.steps.prefetch_related("attempt_rows", "child_runs"), index=index))


@router.post("/runs/{run_id}/score", response={201: ScoreOut, **refusals(400, 404, 413)}, summary="Score a run")
def score_run(request: HttpRequest, run_id: int, payload: ScoreIn) -> Status:
    """A reviewer's score (0-1) and, optionally, verdict on the task: they outrank every
    evaluator's, and the run's score and outcome are recomputed at once."""
    user = require_write(request)
    require_perm(user, "feedback.score_run")
    run = _visible_run(request, run_id)
    configs = list(ScoreConfig.objects.filter(archived=False))
    data = {**payload.model_dump(exclude={"scores"}), **_config_fields(configs, payload.scores)}
    form = HumanScoreForm(data, configs=configs)
    if not form.is_valid():
        raise form_invalid(form, {config_field_name(c): f"scores.{c.name}" for c in form.score_configs})
    row = services.run_add_human_score(run=run, user=user, **form.cleaned_data)
    run.refresh_from_db()
    return Status(201, {"evaluation": row, "run": run})


def _config_fields(configs: list[ScoreConfig], scores: dict) -> dict:
    """The API's ``scores`` by configuration name, as the form's fields (a boolean as 1 or 0)."""
    fields = {config.name: config_field_name(config) for config in configs}
    unknown = sorted(set(scores) - set(fields))
    if unknown:
        known = ", ".join(fields) or _("none")
        raise invalid(
            {
                "scores": [
                    _("No score configuration is named %(names)s (there are: %(known)s).")
                    % {"names": ", ".join(unknown), "known": known}
                ]
            }
        )
    return {fields[name]: int(value) if isinstance(value, bool) else value for name, value in scores.items()}


@router.get(
    "/score-configs",
    response={200: list[ScoreConfigOut], **refusals()},
    tags=["scores"],
    summary="List score configurations",
)
def list_score_configs(request: HttpRequest) -> list[ScoreConfig]:
    """What reviewers rate beside the 0-1 score, as operators defined it (Settings → Scores); the
    archived ones too, flagged, since their values stay on the runs scored with them."""
    _require_run_reader(request)
    return list(ScoreConfig.objects.all())


@router.post("/runs/{run_id}/rerun", response={201: RunSummaryOut, **refusals(400, 404)}, summary="Run again")
def rerun_run(request: HttpRequest, run_id: int, response: HttpResponse) -> Status:
    """A fresh run of the same task, as you (from the same workspace, if you may use it). The
    answer is the new run; its address is in ``Location``."""
    user = require_write(request)
    require_perm(user, "feedback.add_task")
    try:
        new_run = services.run_rerun(run=_visible_run(request, run_id), user=user)
    except quota.QuotaExceeded as refused:
        raise invalid({"__all__": [str(refused)]}) from None
    response["Location"] = reverse("api-v1:read_run", kwargs={"run_id": new_run.pk})
    return Status(201, _visible_run(request, new_run.pk))


@router.post("/runs/{run_id}/cancel", response={200: RunSummaryOut, **refusals(400, 404, 409)}, summary="Cancel a run")
def cancel_run(request: HttpRequest, run_id: int) -> Run:
    """A queued or waiting run stops at once; a running one at its next step (``cancel_requested``
    says it will). 409 if it had already ended."""
    user = require_write(request)
    _require_run_reader(request)
    run = _visible_run(request, run_id)
    if not services.run_cancel(run=run, user=user):
        raise ApiError(409, _("Run #%(id)s had already ended.") % {"id": run.pk})
    return _visible_run(request, run.pk)
