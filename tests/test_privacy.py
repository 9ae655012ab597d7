"""Personal data and secrets are masked before they are stored; tools still get real values."""

import json

import pytest
from django.urls import reverse

from feedback import services
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import AgentLoop, execute_run
from feedback.agent.sandbox import sandbox_path
from feedback.models import Run, Step, StepAttempt, Task, ToolConfirmation, Workspace
from feedback.privacy import CARD_MASK, PHONE_MASK, SECRET_MASK, email_pseudonym, luhn_valid, mask, mask_text

KEY = "sk-proj-Zt8QeX3vLm9RkP2sWa7YbN4cHd6Jf1Gu"


class ScriptedModel:
    backend, name = "test", "scripted"

    def __init__(self, replies):
        self.replies = list(replies)

    def complete(self, messages, tools):
        return self.replies.pop(0)


def _all_stored_text(run: Run) -> str:
    """Everything the database keeps about a run, as one string."""
    run.refresh_from_db()
    parts = [run.task.text, run.task.expected_answer, run.system_prompt, run.final_output, run.error, run.plan]
    for step in Step.objects.filter(run__in=[run, *run.children.all()]):
        parts += [step.thought, step.arguments, step.result, step.error]
    parts += list(StepAttempt.objects.filter(step__run=run).values_list("error", flat=True))
    parts += list(ToolConfirmation.objects.filter(run=run).values_list("arguments", flat=True))
    return json.dumps(parts, default=str)


@pytest.mark.parametrize(
    ("sample", "secret", "replacement"),
    [
        ("Please write to jane.doe+billing@example.co.uk today.", "jane.doe+billing@example.co.uk", "@masked.invalid"),
        ("Call me on +44 20 7946 0958.", "7946 0958", PHONE_MASK),
        ("US office: (415) 555-0132, ask for Sam", "555-0132", PHONE_MASK),
        ("Card 4111 1111 1111 1111 exp 12/27", "4111 1111 1111 1111", CARD_MASK),
        ("Amex 3782-822463-10005 on file", "3782-822463-10005", CARD_MASK),
        (f"OPENAI_API_KEY={KEY}", KEY, SECRET_MASK),
        (
            "token ghp_16C7e42F292c6912E7710c838347Ae178B4a in the CI log",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            SECRET_MASK,
        ),
        ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", SECRET_MASK),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dGVzdHNpZ25hdHVyZQ", "eyJhbGci", SECRET_MASK),
        ("curl -H 'Authorization: Token 9f8e7d6c5b4a39281706' ...", "9f8e7d6c5b4a39281706", SECRET_MASK),
    ],
)
def test_realistic_samples_are_masked(sample, secret, replacement):
    masked = mask_text(sample)
    assert secret not in masked
    assert replacement in masked


@pytest.mark.parametrize(
    "harmless",
    [
        "What is (17 * 23 + 4) / 5?",
        "Order 4111 1111 1111 1112 is not a card (Luhn fails)",
        "Meeting on 2024-01-15 at 10:30, 3 attendees, budget 1 250 000",
        "Version 1.2.3 of release-notes.txt has 1234 words",
        "Server 192.168.100.200 answered in 0.25 s",
        "Compute 1234567 * 89",
    ],
)
def test_ordinary_text_is_left_alone(harmless):
    assert mask_text(harmless) == harmless


def test_luhn_check():
    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112")


def test_masking_is_stable_and_idempotent():
    once = mask_text("from ops@northwind.example")
    assert once == mask_text("from OPS@northwind.example".replace("OPS", "ops"))
    assert mask_text(once) == once
    assert mask({"a": ["x@example.com", 3, None]})["a"][1:] == [3, None]


def test_masking_can_be_turned_off(settings):
    settings.PRIVACY_MASKING = False
    assert mask_text("x@example.com 4111 1111 1111 1111") == "x@example.com 4111 1111 1111 1111"


def test_the_task_text_is_stored_masked(db, staff):
    run = services.task_submit(
        user=staff, kind=Task.Kind.GENERAL, text="Email bob@example.com the card 4111-1111-1111-1111",
        expected_answer="Reply sent to bob@example.com",
    )  # fmt: skip
    task = Task.objects.get(pk=run.task_id)
    assert "bob@example.com" not in task.text + task.expected_answer
    assert CARD_MASK in task.text and email_pseudonym("bob@example.com") in task.text


def test_tool_results_steps_and_final_output_are_stored_masked(db, staff, settings):
    settings.OPENAI_API_KEY = "an-unusual-key-format-123456"
    folder = settings.WORKSPACES_ROOT / "pii"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text(
        "Contact: alice@example.org, +1 415 555 0199. Card 5555 5555 5555 4444.\n"
        f"Keys: {KEY} and an-unusual-key-format-123456\n"
    )
    workspace = Workspace.objects.create(name="pii", description="")
    run = services.task_submit(user=staff, kind=Task.Kind.FILE_ANALYSIS, text="Read notes.txt", workspace=workspace)
    replies = [
        LLMReply(content="Reading alice@example.org's notes",
                 tool_calls=[ToolCall("c1", "read_text_file", json.dumps({"path": "notes.txt"}))]),
        LLMReply(content=f"Alice is alice@example.org, phone +1 415 555 0199, key {KEY}."),
    ]  # fmt: skip
    execute_run(run.pk, model=ScriptedModel(replies))
    stored = _all_stored_text(run)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    for secret in ("alice@example.org", "415 555 0199", "5555 5555 5555 4444", KEY, "an-unusual-key-format-123456"):
        assert secret not in stored
    read = run.steps.get(tool_name="read_text_file")
    assert read.success and email_pseudonym("alice@example.org") in read.result["text"]
    assert SECRET_MASK in run.final_output and PHONE_MASK in run.final_output


def test_the_reply_tool_gets_the_real_address_the_record_the_pseudonym(demo_workspace, reviewer):
    run = Run.objects.create(
        task=Task.objects.create(text="Triage inbox/ and reply to the urgent ones", kind=Task.Kind.EMAIL_TRIAGE,
                                 workspace=demo_workspace),
        task_kind=Task.Kind.EMAIL_TRIAGE,
    )  # fmt: skip
    execute_run(run.pk)
    for confirmation in ToolConfirmation.objects.filter(run=run):
        services.confirmation_decide(confirmation=confirmation, user=reviewer, approve=True)
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    sent = sorted((sandbox_path(run) / "outbox").glob("*.txt"))
    assert [p.read_text().splitlines()[0] for p in sent] == [
        "To: ops@northwind.example", "To: j.chen@example.org", "To: finance@contoso.example"
    ]  # fmt: skip
    assert "northwind.example" not in _all_stored_text(run)


def test_an_unresolvable_pseudonym_is_refused_not_sent(db):
    run = Run.objects.create(task=Task.objects.create(text="Reply", kind=Task.Kind.GENERAL), task_kind="general")
    loop = AgentLoop(run, lease="l", model=ScriptedModel([]))
    from feedback.agent.invoker import invoke

    outcome = invoke(
        "send_reply", json.dumps({"to": email_pseudonym("ghost@example.com"), "subject": "s", "body": "b"}),
        loop.context, loop.all_tools,
    )  # fmt: skip
    assert not outcome.ok and "masked address" in outcome.error


def test_the_api_key_never_reaches_a_page(client, operator, settings, db):
    settings.OPENAI_API_KEY = KEY
    run = services.task_submit(user=operator, kind=Task.Kind.GENERAL, text=f"My key is {KEY}, keep it")
    execute_run(run.pk, model=ScriptedModel([LLMReply(content=f"Noted the key {KEY}.")]))
    client.force_login(operator)
    pages = [
        client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode(),
        b"".join(client.get(reverse("feedback-run-trace-json", args=[run.pk])).streaming_content).decode(),
        client.get(reverse("feedback-run-list")).content.decode(),
    ]
    assert all(KEY not in page for page in pages)
    assert KEY not in _all_stored_text(run)


def test_a_reviewers_comment_and_corrected_answer_are_masked(reviewer):
    from feedback import services

    from .factories import make_run

    run = make_run(status="succeeded")
    services.run_add_human_score(
        run=run, user=reviewer, score=0.2, comment="Customer maria.lopez@example.com was charged twice",
        corrected_answer="Refund card 4111 1111 1111 1111",
    )  # fmt: skip
    evaluation = run.evaluations.get(kind="human")
    assert "maria.lopez@example.com" not in evaluation.feedback and "was charged twice" in evaluation.feedback
    assert "4111 1111 1111 1111" not in evaluation.corrected_answer
