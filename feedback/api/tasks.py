"""Submitting a task, the workspaces a caller may use for it, who the caller is, and the metrics."""

from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.datastructures import MultiValueDict
from ninja import Query, Router, Status

from feedback import metrics, quota, selectors, services
from feedback.forms import MetricsFilterForm, TaskForm
from feedback.models import Workspace

from . import idempotency
from .auth import require_perm, require_write, token_of, user_of
from .errors import form_invalid, invalid, refusals
from .figures import MetricsOut
from .outputs import MeOut, RunSummaryOut, WorkspaceOut
from .schemas import MetricsQuery, TaskIn

router = Router()


@router.post(
    "/tasks",
    response={201: RunSummaryOut, **refusals(400, 413, 422)},
    tags=["tasks"],
    summary="Submit a task",
    openapi_extra={"parameters": [idempotency.OPENAPI_PARAMETER]},
)
def submit_task(request: HttpRequest, payload: TaskIn, response: HttpResponse) -> Status:
    """Queue a run of a new task, as the task form does: the same kinds, length, workspaces (shared
    ones, and your own uploads) and file checks (up to 10 UTF-8 text files of 1 MB, given as
    ``{"name", "content"}``, copied into a new workspace of yours on top of the chosen one). The
    answer is the queued run; its address is in ``Location``.

    Send an ``Idempotency-Key`` (e.g. a new UUID per task) to retry safely: the same key with the
    same body answers the first run again (``Idempotent-Replayed: true``) and queues nothing more;
    the same key with another body is 422."""
    user = require_write(request)
    require_perm(user, "feedback.add_task")
    key = idempotency.key_of(request)
    if key is None:
        answer = _submit(user, payload)
    else:
        answer = idempotency.answer_once(
            user=user,
            key=key,
            fingerprint=idempotency.fingerprint(request, payload),
            create=lambda: _submit(user, payload),
        )
        if answer.replayed:
            response[idempotency.REPLAYED_HEADER] = "true"
    response["Location"] = reverse("api-v1:read_run", kwargs={"run_id": answer.body["id"]})
    return Status(answer.status, answer.body)


def _submit(user: AbstractBaseUser, payload: TaskIn) -> idempotency.Answer:
    files = [SimpleUploadedFile(f.name, f.content.encode()) for f in payload.files]
    data = {**payload.model_dump(exclude={"files", "workspace_id"}), "workspace": payload.workspace_id}
    form = TaskForm(data, MultiValueDict({"files": files}), user=user)
    if not form.is_valid():
        error = form_invalid(form)
        # The form's field is the workspace; the body's, its id.
        if "workspace" in error.errors:
            error.errors["workspace_id"] = error.errors.pop("workspace")
        raise error
    fields = form.cleaned_data
    try:
        run = services.task_submit(
            user=user,
            text=fields["text"],
            kind=fields["kind"],
            expected_answer=fields["expected_answer"],
            workspace=fields["workspace"],
            files=fields["files"],
        )
    except quota.QuotaExceeded as refused:  # another submission of theirs took the room first
        raise invalid({"__all__": [str(refused)]}) from None
    run.refresh_from_db()
    # As JSON, as a replay gives it from the key's row: the first answer and a retry's are the same.
    return idempotency.Answer(201, RunSummaryOut.model_validate(run).model_dump(mode="json"))


@router.get("/workspaces", response={200: list[WorkspaceOut], **refusals()}, tags=["tasks"], summary="List workspaces")
def list_workspaces(request: HttpRequest) -> list[Workspace]:
    """The workspaces you may start a run from: the shared ones first, then your own uploads
    (then others', for those who read every run)."""
    user = user_of(request)
    require_perm(user, "feedback.view_workspace")
    return list(selectors.workspaces_usable_by(user))


@router.get("/me", response={200: MeOut, **refusals()}, tags=["account"], summary="Who the token acts as")
def me(request: HttpRequest) -> dict:
    user, token = user_of(request), token_of(request)
    permissions = (p.removeprefix("feedback.") for p in user.get_all_permissions() if p.startswith("feedback."))
    return {
        "username": user.get_username(),
        "roles": sorted(user.groups.values_list("name", flat=True)),
        "permissions": sorted(permissions),
        "token": {"name": token.name, "prefix": token.prefix, "scope": token.scope, "created_at": token.created_at,
                  "expires_at": token.expires_at},
    }  # fmt: skip


@router.get("/metrics", response={200: MetricsOut, **refusals(400)}, tags=["metrics"], summary="Metrics summary")
def read_metrics(request: HttpRequest, filters: Query[MetricsQuery]) -> dict:
    """The metrics page's figures (definitions in docs/evaluation.md) over the last ``days``, per ``day`` or
    ``week``: the window's totals, each period's, and per tool; and the disk now."""
    require_perm(user_of(request), "feedback.view_metrics")
    form = MetricsFilterForm({k: str(v) for k, v in filters.model_dump(exclude_none=True).items()})
    if not form.is_valid():
        raise form_invalid(form)
    window = metrics.Window.last(
        form.cleaned_data["days"], kind=form.cleaned_data["kind"], granularity=form.cleaned_data["granularity"]
    )
    counts = metrics.period_counts(window)
    periods = zip(
        metrics.score_trend(window, counts),
        metrics.repeated_error_trend(window, counts),
        metrics.intervention_trend(window, counts),
        strict=True,
    )
    return {
        "since": window.since,
        "until": window.until,
        "kind": window.kind,
        "granularity": window.granularity,
        "scores": metrics.score_summary(window, counts),
        "errors": metrics.repeated_error_summary(window, counts),
        "interventions": metrics.intervention_summary(window, counts),
        "strategies": metrics.strategy_effectiveness(window),
        "periods": [
            {"period": scores["period"], "scores": scores, "errors": errors, "interventions": interventions}
            for scores, errors, interventions in periods
        ],
        "tools": metrics.tool_stats(window),
        "disk": selectors.disk_figures(),
    }
