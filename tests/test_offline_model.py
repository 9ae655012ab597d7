"""The offline demo model, end to end through the real loop: what it does with each demo task
(triage, file analysis, arithmetic in digits and in words), and what it says honestly when it
cannot read a task."""

import pytest

from feedback import services
from feedback.agent.loop import execute_run
from feedback.models import Run, Task
from feedback.privacy import email_pseudonym

from .factories import make_run
from .test_agent_loop import tools_called

pytestmark = pytest.mark.django_db


def test_offline_model_triages_the_demo_inbox(demo_workspace):
    run = make_run(
        text="Classify the emails in inbox/ and flag the urgent ones",
        kind=Task.Kind.EMAIL_TRIAGE,
        workspace=demo_workspace,
    )
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.llm_backend == "offline"
    assert "Triaged 6 email(s)" in run.final_output
    assert "002-site-down.txt: technical — URGENT" in run.final_output
    reads = run.steps.filter(tool_name="read_text_file")
    assert reads.count() == 6
    # The six reads came from one model reply (one turn) and ran concurrently.
    assert reads.values("turn").distinct().count() == 1
    assert min(r.finished_at for r in reads) > max(r.started_at for r in reads) or reads.count() == 6
    assert [p["status"] for p in run.plan] == ["completed", "completed", "completed"]  # answered: the plan is done
    indices = list(run.steps.values_list("index", flat=True))
    assert indices == list(range(run.step_count))


def test_offline_model_analyses_a_file(demo_workspace):
    run = make_run(
        text="Summarise report.txt and count its words", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace
    )
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert "80 words" in run.final_output
    assert tools_called(run) == ["update_plan", "read_text_file", "analyze_text"]
    assert run.plan[0] == {"title": "Read the file", "status": "completed"}


def test_offline_model_does_arithmetic(db):
    run = make_run(text="What is (17 * 23 + 4) / 5?")
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.final_output.endswith("= 79")
    step = run.steps.get(tool_name="calculator")
    assert step.arguments == {"expression": "(17 * 23 + 4) / 5"}
    assert step.result == {"expression": "(17 * 23 + 4) / 5", "value": 79}
    # It succeeded at once: the step is its only record (attempt rows come with a failure).
    assert step.attempts == 1 and step.attempt_rows.count() == 0


@pytest.mark.parametrize(
    ("text", "expression", "value"),
    [
        ("What is seven times six plus three?", "7 * 6 + 3", 45),
        ("add twelve and thirty", "(12 + 30)", 42),
        ("What is the sum of 3, four and five?", "(3 + 4 + 5)", 12),
        ("What is the product of six and seven?", "(6 * 7)", 42),
        ("Two thousand three hundred and forty-five minus forty-five", "2345 - 45", 2300),
        ("What is twelve squared divided by four?", "(12 ** 2) / 4", 36),
        ("Subtract nineteen from a hundred", "(100 - 19)", 81),
        ("What is the square root of one hundred and forty-four?", "sqrt(144)", 12),
    ],
)
def test_offline_model_reads_arithmetic_in_words(db, text, expression, value):
    run = make_run(text=text)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.steps.get(tool_name="calculator").arguments == {"expression": expression}
    assert run.final_output == f"{expression} = {value}"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # Arithmetic it cannot read: it says what it reads, never that it does no arithmetic.
        ("What is a dozen plus nine?", "I could not read a calculation in this task."),
        ("What is half of forty plus nine?", "I could not read a calculation in this task."),
        ("Write a poem about the sea", "looks like none of them"),
    ],
)
def test_offline_model_says_honestly_what_it_cannot_read(db, text, says):
    run = make_run(text=text, kind=Task.Kind.GENERAL)
    execute_run(run.pk)
    run.refresh_from_db()
    assert says in run.final_output and "only handles" not in run.final_output
    assert not run.steps.filter(tool_name="calculator").exists()


def test_offline_triage_with_replies_waits_for_a_person(demo_workspace, reviewer):
    run = make_run(
        text="Triage the emails in inbox/ and reply to the urgent ones",
        kind=Task.Kind.EMAIL_TRIAGE,
        workspace=demo_workspace,
    )
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_CONFIRMATION
    waiting = list(run.confirmations.order_by("pk"))
    assert [c.arguments["to"] for c in waiting] == [
        email_pseudonym(a) for a in ("ops@northwind.example", "j.chen@example.org", "finance@contoso.example")
    ]
    for i, confirmation in enumerate(waiting):
        services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=i != 1, reason="")
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert "Replied to 2; 1 reply(ies) not sent." in run.final_output
    assert run.steps.filter(tool_name="send_reply", success=True).count() == 2


def test_offline_model_reads_the_addresses_a_task_names(db):
    from feedback.demo_history import status_service

    with status_service() as url:
        run = make_run(text=f"What do {url} and https://example.org/news.json say today?", kind=Task.Kind.GENERAL)
        execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    calls = run.steps.filter(tool_name="http_get").order_by("index")
    # Both in one turn; the sentence's question mark is not part of the second address.
    assert [c.arguments["url"] for c in calls] == [url, "https://example.org/news.json"]
    assert calls.values("turn").distinct().count() == 1
    lines = run.final_output.splitlines()
    assert lines[0] == "Read 1 of 2 address(es):"
    assert lines[1] == f'- {url}: HTTP 200, application/json: {{"status": "ok", "requests_seen": 2}}'
    assert lines[2].startswith("- https://example.org/news.json: could not be read (The host 'example.org' is not")
