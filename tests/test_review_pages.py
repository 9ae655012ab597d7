"""The review queue, human scores and re-evaluation from the run page, and the metrics page."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback.evaluation.chain import evaluate_run
from feedback.models import Evaluation, EvaluationProfile, Run, Task

from .factories import make_finished_run

pytestmark = pytest.mark.django_db


def evaluation(run, kind, score, status=Evaluation.Status.OK, round=1):
    return Evaluation.objects.create(run=run, round=round, evaluator=kind, kind=kind, score=score, status=status)


@pytest.fixture
def queue_runs():
    now = timezone.now()
    low = make_finished_run(output="?", score=0.1, created_at=now - timedelta(hours=5), text="low score task")
    disagree = make_finished_run(output="x", score=0.6, created_at=now - timedelta(hours=4), text="disagree task")
    evaluation(disagree, "judge", 0.95)
    evaluation(disagree, "rule", 0.25)
    failed = make_finished_run(output="x", score=0.9, created_at=now - timedelta(hours=3), text="failed judge task")
    evaluation(failed, "rule", 0.9)
    evaluation(failed, "judge", None, status=Evaluation.Status.FAILED)
    fine = make_finished_run(output="x", score=0.9, created_at=now - timedelta(hours=2), text="fine task")
    evaluation(fine, "judge", 0.9)
    evaluation(fine, "rule", 0.8)
    running = make_finished_run(output="", score=0.0, status=Run.Status.RUNNING, text="running task")
    # Failed in round 1 but fine in round 2: only the latest round counts.
    healed = make_finished_run(output="x", score=0.9, created_at=now - timedelta(hours=1), text="healed task")
    evaluation(healed, "judge", None, status=Evaluation.Status.FAILED)
    evaluation(healed, "judge", 0.9, round=2)
    return {
        "low": low,
        "disagree": disagree,
        "failed": failed,
        "fine": fine,
        "running": running,
        "healed": healed,
    }


def test_the_queue_lists_runs_that_need_a_person_newest_first(client, reviewer, queue_runs):
    client.force_login(reviewer)
    response = client.get(reverse("feedback-review-queue"))
    assert response.status_code == 200
    page = list(response.context["page"])
    assert [r.pk for r in page] == [queue_runs[k].pk for k in ("failed", "disagree", "low")]
    html = response.content.decode()
    assert "Judge 0.95 vs rule 0.25" in html and "Evaluator failed" in html and "Low score" in html
    assert 'href="/review/"' in html and 'href="/metrics/"' in html  # nav links for reviewers


def test_a_human_score_takes_a_run_off_the_queue(client, reviewer, queue_runs):
    client.force_login(reviewer)
    run = queue_runs["low"]
    response = client.post(
        reverse("feedback-run-score", args=[run.pk]),
        {"score": "0.7", "comment": "<b>Fine</b> after all", "corrected_answer": "4"},
    )
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.score == 0.7
    human = run.evaluations.get(kind="human")
    assert (human.author, human.feedback, human.corrected_answer) == (reviewer, "<b>Fine</b> after all", "4")
    queue = client.get(reverse("feedback-review-queue")).context["page"]
    assert run.pk not in [r.pk for r in queue]
    page = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "&lt;b&gt;Fine&lt;/b&gt; after all" in page and "<b>Fine</b>" not in page


def test_a_profile_threshold_decides_what_is_low(client, reviewer, queue_runs):
    EvaluationProfile.objects.create(
        task_kind=Task.Kind.ARITHMETIC, evaluators=[{"evaluator": "rule"}], review_below=0.05
    )
    client.force_login(reviewer)
    queue = client.get(reverse("feedback-review-queue")).context["page"]
    assert queue_runs["low"].pk not in [r.pk for r in queue]


def test_the_htmx_score_form_answers_with_the_evaluation_section(client, reviewer):
    run = make_finished_run(output="4", expected_answer="4")
    evaluate_run(run.pk)
    client.force_login(reviewer)
    url = reverse("feedback-run-score", args=[run.pk])
    response = client.post(url, {"score": "2"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card" id="run-evaluations"')
    assert "Ensure this value is less than or equal to 1" in html
    assert not run.evaluations.filter(kind="human").exists()
    response = client.post(url, {"score": "0.3"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert 'id="run-score">0.30<' in html and "Offline heuristic judge (no LLM)" in html


def test_the_run_page_shows_rounds_and_the_reevaluate_button(
    client, reviewer, operator, django_capture_on_commit_callbacks
):
    run = make_finished_run(output="4", expected_answer="4")
    evaluate_run(run.pk)
    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "Re-evaluate" in html and "Record score" in html and "Offline heuristic judge (no LLM)" in html
    with django_capture_on_commit_callbacks() as queued:
        response = client.post(reverse("feedback-run-reevaluate", args=[run.pk]))
    assert response.status_code == 302 and len(queued) == 1
    client.force_login(operator)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    assert "Re-evaluate" not in html and "Record score" not in html


def test_the_metrics_page_draws_its_charts_from_json(client, operator):
    now = timezone.now()
    make_finished_run(output="4", score=0.5, created_at=now - timedelta(days=1))
    make_finished_run(output="", status=Run.Status.CANCELLED, created_at=now - timedelta(days=1))
    client.force_login(operator)
    response = client.get(reverse("feedback-metrics"), {"days": 7, "granularity": "day", "kind": "arithmetic"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "vendor/chartjs/chart.umd.min.js" in html and "js/metrics.js" in html
    assert 'id="figure-intervention-rate">50 %<' in html
    data = response.context["chart_data"]
    assert len(data["labels"]) == 8 and data["intervention_rate"][-2] == 0.5
    assert '<script id="metrics-data" type="application/json">' in html
    assert json.loads(html.split('type="application/json">')[1].split("</script>")[0])["labels"] == data["labels"]


def test_the_metrics_filters_fall_back_on_bad_input(client, operator):
    client.force_login(operator)
    response = client.get(reverse("feedback-metrics"), {"days": "9999", "granularity": "hour"})
    assert response.status_code == 200
    assert response.context["window"].granularity == "day"
    assert (response.context["window"].until - response.context["window"].since).days == 30
