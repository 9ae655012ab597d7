"""The experiment pages: start one from the list or a strategy's page, read its verdict, pairs
and arms, stop it; bad input refused with nothing started and what was typed kept."""

import pytest
from django.urls import reverse

from feedback.experiments.inline import experiment_run_here
from feedback.models import Experiment, Strategy, StrategyVersion

from .conftest import make_user
from .test_experiments import RESOLVE, _dataset, _nested_files, _sums

pytestmark = pytest.mark.django_db


def test_a_reviewer_starts_a_guidance_experiment_and_sees_it_escaped_and_running(client, sent_tasks):
    reviewer = make_user("rev", "reviewer")
    version = _dataset(reviewer, _sums(3))
    client.force_login(reviewer)
    page = client.get(reverse("feedback-experiment-list")).content.decode()
    assert "No experiment yet" in page and f'value="{version.pk}"' in page
    response = client.post(
        reverse("feedback-experiment-start"),
        {
            "dataset_version": version.pk,
            "repeats": 1,
            "change_kind": "guidance",
            "guidance": "<b>Use the calculator</b>",
        },
    )
    experiment = Experiment.objects.get()
    assert response["Location"] == reverse("feedback-experiment-detail", args=[experiment.pk])
    page = client.get(response["Location"]).content.decode()
    assert "&lt;b&gt;Use the calculator&lt;/b&gt;" in page and "<b>Use the calculator</b>" not in page
    assert "Running: no verdict yet" in page and "0 of 3 pairs measured (2 started)" in page
    assert 'hx-trigger="every 2s"' in page
    assert client.get(reverse("feedback-experiment-list")).content.decode().count(f"#{experiment.pk}") >= 1


def test_bad_guardrails_start_nothing_and_keep_what_was_typed(client):
    reviewer = make_user("rev", "reviewer")
    version = _dataset(reviewer, _sums(2))
    client.force_login(reviewer)
    response = client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "guardrails", "guardrails": "[{oops"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Not JSON" in page and "[{oops" in page
    response = client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "guardrails", "guardrails": '[{"type": "x"}]'},
    )
    assert response.status_code == 400 and "type must be one of" in response.content.decode()
    response = client.post(
        reverse("feedback-experiment-start"), {"dataset_version": version.pk, "repeats": 9, "change_kind": "model"}
    )
    assert response.status_code == 400 and "Name the model" in response.content.decode()
    assert not Experiment.objects.exists()


def test_an_operator_cannot_send_a_strategy_to_an_experiment(client):
    operator = make_user("op", "operator")
    version = _dataset(operator, _sums(2))
    strategy = Strategy.objects.create(title="S", pattern_kind="manual")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, pattern="p", new_guidance="g"
    )
    strategy.save()
    client.force_login(operator)
    response = client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "strategy", "strategy": strategy.pk},
    )
    assert response.status_code == 403 and "reviewer" in response.content.decode()
    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.PROPOSED and not Experiment.objects.exists()


def test_a_strategy_is_tested_from_its_page_and_its_verdict_shown_before_the_trial(client, sent_tasks):
    reviewer = make_user("rev", "reviewer")
    strategy = Strategy.objects.create(title="Find files in sub-folders", pattern_kind="manual")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, pattern="file not found", new_guidance="Look in sub-folders.", guardrails=RESOLVE
    )
    strategy.save()
    version = _dataset(reviewer, _nested_files(10), name="nested")
    client.force_login(reviewer)
    page = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert "Test it on the dataset" in page and "nested v1" in page
    response = client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "strategy", "strategy": strategy.pk},
    )
    experiment = Experiment.objects.get()
    assert response.status_code == 302
    page = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert "still running" in page and f"#{experiment.pk}" in page
    experiment_run_here(experiment.pk, timeout=300)
    page = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert "The paired experiment’s verdict: promote." in page or "The paired experiment's verdict: promote." in page
    assert "Approve for trial" in page

    detail = client.get(reverse("feedback-experiment-detail", args=[experiment.pk])).content.decode()
    assert "Promote: the change helps" in detail and "these figures are frozen" in detail
    assert 'id="arm-treatment"' in detail and 'id="arm-control"' in detail
    assert f"{reverse('feedback-run-compare')}?a=" in detail and "win" in detail
    assert 'hx-trigger="every 2s"' not in detail
    # The live part of an ended experiment stops its polling (286) with its final figures.
    live = client.get(reverse("feedback-experiment-detail", args=[experiment.pk]), headers={"HX-Request": "true"})
    assert live.status_code == 286 and "Wins" in live.content.decode()


def test_stopping_from_the_page_keeps_the_figures_and_says_so(client, sent_tasks):
    reviewer = make_user("rev", "reviewer")
    version = _dataset(reviewer, _sums(3))
    client.force_login(reviewer)
    client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 2, "change_kind": "guidance", "guidance": "Check twice."},
    )
    experiment = Experiment.objects.get()
    assert experiment.pairs.count() == 6
    response = client.post(reverse("feedback-experiment-stop", args=[experiment.pk]), follow=True)
    page = response.content.decode()
    assert "stopped; its figures so far are kept" in page and "Stopped before a verdict" in page
    again = client.post(reverse("feedback-experiment-stop", args=[experiment.pk]), follow=True)
    assert "already ended" in again.content.decode()


def test_experiment_runs_are_marked_on_their_pages_and_kept_out_of_the_review_queue(client, sent_tasks):
    from feedback import selectors
    from feedback.models import Run

    reviewer = make_user("rev", "reviewer")
    version = _dataset(reviewer, _sums(1))
    client.force_login(reviewer)
    client.post(
        reverse("feedback-experiment-start"),
        {"dataset_version": version.pk, "repeats": 1, "change_kind": "guidance", "guidance": "Check twice."},
    )
    experiment = Experiment.objects.get()
    experiment_run_here(experiment.pk, timeout=120)
    pair = experiment.pairs.get()
    page = client.get(reverse("feedback-run-detail", args=[pair.treatment_run_id])).content.decode()
    assert f"the treatment arm (with the change) of experiment #{experiment.pk}" in page
    assert f"?a={pair.control_run_id}&amp;b={pair.treatment_run_id}" in page
    page = client.get(reverse("feedback-run-detail", args=[pair.control_run_id])).content.decode()
    assert f"the control arm (without the change) of experiment #{experiment.pk}" in page
    listing = client.get(reverse("feedback-run-list")).content.decode()
    assert listing.count('class="badge purpose-experiment"') == 2
    Run.objects.filter(purpose=Run.Purpose.EXPERIMENT).update(score=0.1)  # low: a review candidate otherwise
    assert not [run for run in selectors.review_queue() if run.purpose == Run.Purpose.EXPERIMENT]
