"""Mining learns from the reference's verdicts where no run succeeded (issue 25: email triage).

The reference evaluator's feedback names each answer's own labels ("Also names 002-bob, which
should not be named."), so no two items' feedback read alike and mining, which grouped evaluator
feedback by its first words, never saw the one failure every triage run shared. Its verdicts now
name the kind of shortfall (``details["shortfall"]``), and mining groups by that: a triage that
names emails its criterion leaves out becomes one proposal, with guidance about the kind of
shortfall and none of the evidence's labels.
"""

import pytest
from django.urls import reverse

from feedback.evaluation.chain import evaluate_run
from feedback.models import Evaluation, Run, Strategy, Task, Workspace
from feedback.strategies.mining import mine
from feedback.strategies.proposals import mine_and_propose

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mining_thresholds")]
INBOX = ["001-ana", "002-ben", "003-chen", "004-dana", "005-eli", "006-fay"]
TASK = "Triage the support emails in inbox/: name every urgent email by its file name."


def _triage(n: int, *, urgent: list[str], answer: str) -> Run:
    workspace = Workspace.objects.create(name=f"inbox-{n}")
    (workspace.path / "inbox").mkdir(parents=True)
    for stem in INBOX:
        (workspace.path / "inbox" / f"{stem}.txt").write_text(f"From: {stem}@example.com\n\nHello.\n")
    task = Task.objects.create(
        text=f"{TASK} ({n})", kind=Task.Kind.EMAIL_TRIAGE, workspace=workspace, expected_answer=", ".join(urgent)
    )
    run = Run.objects.create(task=task, task_kind=task.kind, status=Run.Status.SUCCEEDED, final_output=answer)
    evaluate_run(run.pk)  # the real chain: rule, reference, the offline judge; the outcome
    run.refresh_from_db()
    return run


def _overreaching_history() -> list[Run]:
    """Six triage runs, each naming every email (each its own urgent ones among them); no success."""
    runs = []
    for n in range(6):
        urgent = [INBOX[n], INBOX[(n + 2) % len(INBOX)]]
        runs.append(_triage(n, urgent=urgent, answer="Urgent: " + ", ".join(INBOX) + "."))
    return runs


def test_the_reference_names_the_kind_of_shortfall_its_feedback_shows():
    extra, missing, right = (
        _triage(0, urgent=["001-ana"], answer="Urgent: 001-ana and 002-ben."),
        _triage(1, urgent=["001-ana", "003-chen"], answer="Urgent: 001-ana."),
        _triage(2, urgent=["001-ana"], answer="Only 001-ana is urgent."),
    )
    shortfall = {
        run: run.evaluations.get(kind=Evaluation.Kind.REFERENCE).details.get("shortfall")
        for run in (extra, missing, right)
    }
    assert shortfall == {extra: "names labels it should not", missing: "leaves out expected labels", right: None}
    assert extra.outcome == missing.outcome == Run.Outcome.NOT_ACCOMPLISHED


def test_feedback_that_names_each_answers_own_labels_is_one_pattern_of_its_kind_of_shortfall():
    runs = _overreaching_history()
    feedback = {run.evaluations.get(kind=Evaluation.Kind.REFERENCE).feedback for run in runs}
    assert len(feedback) == 6  # every item's feedback its own: no two read alike
    patterns = {p.key: p for p in mine(window_days=30) if p.kind == "evaluator_feedback"}
    pattern = patterns["evaluator_feedback:email_triage:reference:names labels it should not"]
    assert (pattern.failing_with, pattern.succeeding_with) == (6, 0)
    assert sorted(pattern.evidence) == sorted(run.pk for run in runs)
    assert pattern.details["example_feedback"] in feedback


def test_the_proposal_speaks_of_the_shortfall_and_quotes_no_label(client, reviewer):
    _overreaching_history()
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get(pattern_key="evaluator_feedback:email_triage:overreach")
    guidance = strategy.current_version.new_guidance
    assert "name only the items that meet the task's criterion" in guidance
    assert not any(stem in guidance or stem in strategy.title for stem in INBOX)
    # The reviewer reads one of the evaluator's own feedbacks, outside the prompt.
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    example = html.split('id="evidence-example">', 1)[1].split("</span>", 1)[0]
    assert example.startswith("Also names ") and example.endswith("which should not be named.")
