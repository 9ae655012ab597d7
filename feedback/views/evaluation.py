from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import selectors, services
from feedback.evaluation import evidence
from feedback.forms import HumanScoreForm
from feedback.models import Run

from .runs import PART_RUN, _visible_run, answer

QUEUE_PER_PAGE = 25
# A run that ended this recently may still be waiting for its evaluation: keep the section polling.
EVALUATION_WAIT_SECONDS = 120


def recently_ended(finished_at: datetime | None) -> bool:
    """Whether a run that ended then may still be waiting for its evaluation."""
    return finished_at is not None and (timezone.now() - finished_at).total_seconds() < EVALUATION_WAIT_SECONDS


def evaluation_context(request: HttpRequest, run: Run, form: HumanScoreForm | None = None) -> dict:
    """What the run page's evaluation section needs (shared by the page and its partial)."""
    evaluations = selectors.run_evaluations(run)
    pending = not evaluations and (run.is_active or recently_ended(run.finished_at))
    can_score = request.user.has_perm("feedback.score_run")
    # The section shows the form (None: no form) to a scorer of an ended, evaluated run; made only
    # then, since its fields are the score configurations, read by a query.
    scorable = can_score and not run.is_active and not pending
    return {
        "run": run,
        "evaluations": evaluations,
        "evaluation_pending": pending,
        "heuristic_hint": evidence.heuristic_hint(run, evaluations),
        # While the run is live its trace's tail is the page's poller, and brings this section
        # once the run has ended; from then on it polls itself until the evaluation is there.
        "evaluation_polls": pending and not run.is_active,
        "can_score": can_score,
        "score_form": (form or HumanScoreForm()) if scorable else None,
    }


def run_evaluations(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run page's evaluation section (it polls itself after the run while it awaits one)."""
    return answer(request, run_id, _evaluations, PART_RUN)


def _evaluations(request: HttpRequest, run: Run) -> HttpResponse:
    return render(request, "feedback/run_detail.html#run-evaluations", evaluation_context(request, run))


@permission_required("feedback.score_run", raise_exception=True)
def review_queue(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.review_queue(), QUEUE_PER_PAGE).get_page(request.GET.get("page"))
    template = "feedback/review_queue.html"
    if request.htmx:
        template += "#review-table"
    return render(request, template, {"page": page})


@require_POST
@permission_required("feedback.score_run", raise_exception=True)
def run_score(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    form = HumanScoreForm(request.POST)
    recorded = form.is_valid()
    if recorded:
        services.run_add_human_score(run=run, user=request.user, **form.cleaned_data)
        run.refresh_from_db()
    if request.htmx:
        # htmx swaps only 2xx answers: an invalid form comes back as 200 with its errors shown.
        context = evaluation_context(request, run, None if recorded else form)
        return render(request, "feedback/run_detail.html#run-evaluations", context)
    if recorded:
        messages.success(request, _("Your score for run #%(id)s is recorded.") % {"id": run.pk})
    else:
        errors = form.errors.as_text()
        messages.error(request, _("The score was not recorded: %(errors)s") % {"errors": errors})
    return redirect("feedback-run-detail", run_id=run.pk)


@require_POST
@permission_required("feedback.score_run", raise_exception=True)
def run_reevaluate(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if run.is_active:
        messages.info(request, _("Run #%(id)s is evaluated once it has ended.") % {"id": run.pk})
    else:
        number = services.run_reevaluate(run=run, user=request.user)
        messages.success(request, _("Evaluation round %(n)s is queued.") % {"n": number})
    return redirect("feedback-run-detail", run_id=run.pk)
