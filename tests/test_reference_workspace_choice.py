"""A choice among the workspace's files (issue 25): when the expected answer names files of the
run's workspace ("name every urgent email by its file name"), an answer that also names a file it
should not have chosen is not accomplished, as the dataset's checker says (its forbidden labels).
Before, the reference evaluator credited every expected name and ignored the others: the product's
*accomplished* disagreed with the checker on most triage runs."""

import pytest

from feedback.datasets.checkers import check
from feedback.evaluation.reference import reference_evaluator, workspace_choices
from feedback.models import DatasetItem, Run, Task, Workspace

pytestmark = pytest.mark.django_db
INBOX = ["001-alice", "002-bob", "003-carol", "004-dan"]


@pytest.fixture
def inbox(settings):
    workspace = Workspace.objects.create(name="triage-choice")
    (workspace.path / "inbox").mkdir(parents=True)
    for stem in INBOX:
        (workspace.path / "inbox" / f"{stem}.txt").write_text(f"From: {stem}@example.com\n\nHello.\n")
    (workspace.path / "README.md").write_text("An inbox.\n")
    return workspace


def _verdict(workspace, expected: str, answer: str, text: str = "Name every urgent email by its file name."):
    task = Task.objects.create(text=text, kind="email_triage", workspace=workspace, expected_answer=expected)
    run = Run.objects.create(task=task, task_kind="email_triage", status="succeeded", final_output=answer)
    return reference_evaluator(run, {})


@pytest.mark.parametrize(
    ("expected", "answer", "accomplished"),
    [
        ("001-alice, 003-carol", "The urgent ones are 001-alice.txt and 003-carol.txt.", True),
        ("001-alice, 003-carol", "Urgent: 001-alice, 002-bob, 003-carol.", False),  # one more named
        ("002-bob", "Only 002-bob is urgent.", True),  # one label: a choice all the same
        ("002-bob", "002-bob and 004-dan are urgent.", False),
        ("002-bob", "004-dan is urgent.", False),
    ],
)
def test_naming_a_file_not_chosen_is_not_accomplished_as_the_checker_says(inbox, expected, answer, accomplished):
    verdict = _verdict(inbox, expected, answer)
    assert verdict.accomplished is accomplished and verdict.details["mode"] == "labels", verdict
    # The dataset's checker, given the others as forbidden labels, says the same.
    wanted = [e.strip() for e in expected.split(",")]
    item = DatasetItem(
        checker="labels", expected=wanted, checker_options={"forbidden": [s for s in INBOX if s not in wanted]}
    )
    assert check(item, answer).passed is accomplished


def test_the_feedback_names_the_files_it_should_not_have_chosen(inbox):
    # All the expected ones are there, and the verdict is still "not accomplished": the reader is
    # told why, not "all expected labels present".
    verdict = _verdict(inbox, "001-alice, 003-carol", "Urgent: 001-alice, 002-bob, 003-carol and 004-dan.")
    assert not verdict.accomplished
    assert verdict.feedback == "Also names 002-bob, 004-dan, which should not be named."
    missing = _verdict(inbox, "001-alice, 003-carol", "Urgent: 001-alice and 002-bob.")
    assert missing.feedback == "Missing labels: 003-carol. Also names 002-bob, which should not be named."
    assert _verdict(inbox, "002-bob", "Only 002-bob is urgent.").feedback == "All expected labels present."


def test_the_choices_are_the_files_of_the_chosen_ones_folders(inbox):
    task = Task.objects.create(text="t", kind="email_triage", workspace=inbox, expected_answer="001-alice, 004-dan")
    run = Run(task=task)
    assert workspace_choices(run, task.expected_answer) == INBOX  # README.md is in another folder
    # Labels that are not the workspace's files: no choice among files, the old comparison.
    assert workspace_choices(run, "urgent, billing") == []
    verdict = _verdict(inbox, "urgent, billing", "It is urgent and about billing; 001-alice wrote it.")
    assert verdict.accomplished and "all_labels" not in verdict.details
