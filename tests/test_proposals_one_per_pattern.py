"""One proposal per pattern (issue 23, point 5): one failure seen by several evaluators and mined
twice is one proposal, with a readable title that agrees with its guidance, a confidence that
is the pattern's lift with its interval (or none), a worked example only from a run everyone may
see, and a rejected proposal's recurrence shown, not reinforced."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from feedback.models import Evaluation, Run, Step, Strategy, Task, Workspace
from feedback.strategies.proposals import mine_and_propose
from feedback.strategies.services import strategy_reject
from feedback.strategies.wording import _ERROR_ADVICE

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mining_thresholds")]

THREE = [
    ("rule", "rule", "The answer gives up (“I could not find”)."),
    ("offline_heuristic_judge", "judge", "Offline heuristic judge (no LLM): the answer gives up."),
    ("reference", "reference", "The answer does not match the expected answer."),
]


def _run(*, text, good, error="", workspace=None, evaluations=(), answer="done"):
    task = Task.objects.create(text=text, kind="file_analysis", workspace=workspace)
    run = Run.objects.create(
        task=task,
        task_kind="file_analysis",
        status="succeeded",
        score=0.95 if good else 0.1,
        outcome="accomplished" if good else "not_accomplished",
        final_output=answer,
    )
    Step.objects.create(
        run=run,
        index=0,
        turn=0,
        kind="tool_call",
        tool_name="read_text_file",
        arguments={"path": text[-12:]},
        success=not error,
        error=error,
        error_class="FileNotFoundError" if error else "",
        error_signature=f"sig-{error}" if error else "",
    )
    for evaluator, kind, feedback in evaluations:
        Evaluation.objects.create(
            run=run, evaluator=evaluator, kind=kind, score=0.1, accomplished=False, feedback=feedback
        )
    return run


def _history(*, failing=8, error="No such file: notes.txt", first=0, workspace=None):
    for i in range(first, first + failing):
        _run(text=f"Summarise notes-{i}.txt", good=False, error=error, evaluations=THREE)
    for i in range(10):
        _run(text=f"Summarise report-{first + i}.txt", good=True, workspace=workspace)


def test_one_failure_seen_by_three_evaluators_is_one_proposal_listing_them(client, reviewer):
    _history()
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get()  # one, not one per evaluator
    assert strategy.pattern_kind == "error_signature"
    assert strategy.evidence_summary["evaluators"] == ["offline_heuristic_judge", "reference", "rule"]
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert '<dd id="evaluators">offline_heuristic_judge, reference, rule</dd>' in html


def test_a_second_pass_over_the_same_pattern_updates_its_proposal():
    _history(error="No such file: notes.txt")
    mine_and_propose(window_days=30)
    # The same failure again, with a message that differs by its file name (another signature).
    _history(failing=6, error="No such file: other/path.md", first=100)
    mine_and_propose(window_days=30)
    titles = list(Strategy.objects.values_list("title", flat=True))
    assert len(titles) == len(set(titles)) == 1
    assert Strategy.objects.get().support == 14


def test_a_title_is_a_sentence_that_agrees_with_its_guidance():
    _history()
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.select_related("current_version").get()
    title, guidance = strategy.title, strategy.current_version.new_guidance
    assert title == "Check file paths before calling read_text_file in file analysis tasks"
    assert "<q>" not in title and "fails:" not in title and "no such file" not in title.lower()
    assert "read_text_file" in guidance and "check file paths" in guidance.lower()


@pytest.mark.parametrize("kind", sorted(_ERROR_ADVICE))
def test_every_error_title_names_the_tool_and_advice_of_its_guidance(kind):
    title, guidance = (text.format(tool="calculator", kind="arithmetic") for text in _ERROR_ADVICE[kind])
    assert "calculator" in title and "calculator" in guidance
    # The title's advice (its words before the tool) is what the guidance says.
    advice = re.split(r"\bcalculator\b", title)[0].strip().lower()
    words = [w for w in re.findall(r"[a-z']+", advice) if w not in {"before", "calling", "in"}]
    assert words and all(w in guidance.lower() for w in words), (title, guidance)


def test_confidence_is_the_lift_with_its_interval_never_a_flat_one(client, reviewer):
    _history()
    # Two succeeding runs show the error too (it was retried): the lift is below 1.
    for i in range(2):
        _run(text=f"Summarise retried-{i}.txt", good=True, error="No such file: notes.txt")
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get()
    lift = strategy.evidence_summary["failure_lift"]
    assert strategy.confidence == lift["value"] == round(8 / 10 - 0 / 10, 3)
    assert lift["low"] < lift["value"] < lift["high"] <= 1
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-list")).content.decode()
    assert f"{lift['value']:.2f}" in html and f"(95% {lift['low']:.2f} to {lift['high']:.2f})" in html


def test_without_runs_to_compare_with_there_is_no_confidence(client, reviewer):
    for i in range(8):
        _run(text=f"Summarise notes-{i}.txt", good=False, error="No such file: notes.txt", evaluations=THREE)
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get()
    assert strategy.confidence is None and strategy.evidence_summary["failure_lift"] is None
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert '<dd id="failure-lift"><span class="lift" title="Not measurable' in html and "—" in html


def test_a_private_uploads_run_is_never_copied_into_the_worked_example():
    owner = get_user_model().objects.create_user(username="staff-member", password="pw")
    private = Workspace.objects.create(name="private-uploads", owner=owner)
    _history(workspace=private)
    # The succeeding runs are all on the private upload: no example at all, rather than theirs.
    mine_and_propose(window_days=30)
    version = Strategy.objects.get().current_version
    assert version.worked_example == ""
    assert not any("report-" in v for v in Strategy.objects.values_list("current_version__worked_example", flat=True))


def test_a_shared_run_is_the_worked_example_and_a_private_one_is_not():
    owner = get_user_model().objects.create_user(username="staff-member", password="pw")
    private = Workspace.objects.create(name="private-uploads", owner=owner)
    _history(workspace=private)
    _run(text="Summarise shared-handbook.txt", good=True, answer="The handbook has 3 parts.")
    mine_and_propose(window_days=30)
    example = Strategy.objects.get().current_version.worked_example
    assert "shared-handbook.txt" in example and "report-" not in example


def test_a_rejected_proposal_seen_again_shows_its_recurrence_and_is_not_reinforced(client, reviewer):
    _history()
    mine_and_propose(window_days=30)
    strategy = strategy_reject(strategy=Strategy.objects.get(), reviewer=reviewer, reason="Not useful.")
    _history(failing=3, first=200)
    mine_and_propose(window_days=30)
    strategy.refresh_from_db()
    assert (strategy.status, strategy.support, strategy.evidence.count()) == ("rejected", 8, 8)
    assert strategy.recurrences == 3 and strategy.recurred_at is not None
    mine_and_propose(window_days=30)  # the same runs again are not counted twice
    strategy.refresh_from_db()
    assert strategy.recurrences == 3
    client.force_login(reviewer)
    detail = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    decided = strategy.decided_at.strftime("%Y-%m-%d")
    assert f"seen again 3 times since rejected on {decided}" in detail
    listing = client.get(reverse("feedback-strategy-list")).content.decode()
    assert f'id="recurrence-{strategy.pk}">seen again 3 times since rejected' in listing


def test_a_proposal_made_before_the_identity_is_updated_not_repeated():
    # As the miner keyed it before issue 23: one error signature (and the raw signature title).
    old = Strategy.objects.create(
        title="read_text_file fails: no such file: <q>.",
        pattern_kind="error_signature",
        pattern_key="error_signature:file_analysis:sig-No such file: notes.txt",
        support=8,
    )
    _history()
    mine_and_propose(window_days=30)
    assert list(Strategy.objects.values_list("pk", flat=True)) == [old.pk]
    old.refresh_from_db()
    assert old.support == 16 and old.evidence.count() == 8
