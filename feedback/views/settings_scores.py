"""Settings: score configurations, what reviewers rate beside the 0–1 score (issue 26.1). Operators
define them; the score forms, the API and the metrics page read them."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from feedback.models import ScoreConfig
from feedback.settings_forms import ScoreConfigForm

from .settings_common import delete_page, edit_page

SECTION = "scores"


def _back() -> str:
    return reverse("feedback-settings-score-list")


@permission_required("feedback.view_scoreconfig", raise_exception=True)
def score_config_list(request: HttpRequest) -> HttpResponse:
    configs = (
        ScoreConfig.objects.select_related("updated_by").annotate(given=Count("values")).order_by("archived", "name")
    )
    return render(request, "feedback/settings/score_config_list.html", {"configs": configs, "section": SECTION})


@permission_required("feedback.add_scoreconfig", raise_exception=True)
def score_config_create(request: HttpRequest) -> HttpResponse:
    return edit_page(
        request,
        form_class=ScoreConfigForm,
        instance=None,
        title=_("New score configuration"),
        back_url=_back(),
        section=SECTION,
    )


@permission_required("feedback.change_scoreconfig", raise_exception=True)
def score_config_edit(request: HttpRequest, config_id: int) -> HttpResponse:
    config = get_object_or_404(ScoreConfig, pk=config_id)
    title = _("Score “%(name)s”") % {"name": config.name}
    return edit_page(
        request, form_class=ScoreConfigForm, instance=config, title=title, back_url=_back(), section=SECTION
    )


@permission_required("feedback.delete_scoreconfig", raise_exception=True)
def score_config_delete(request: HttpRequest, config_id: int) -> HttpResponse:
    config = get_object_or_404(ScoreConfig, pk=config_id)
    if config.values.exists():
        # Reviewers' values are evidence: a configuration in use is archived, never deleted.
        messages.error(request, _("“%(name)s” has values on runs: archive it instead.") % {"name": config.name})
        return redirect(_back())
    return delete_page(
        request,
        instance=config,
        what=_("the score configuration “%(name)s”") % {"name": config.name},
        consequence=_("No reviewer has used it, so no value goes with it."),
        back_url=_back(),
        section=SECTION,
    )
