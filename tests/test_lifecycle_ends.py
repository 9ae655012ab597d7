"""Every way a run ends goes through one owner (feedback/lifecycle.py) and leaves the same
after-effects: the end written once, the outcome of a run without an answer not accomplished at
once, its pending confirmations withdrawn, its MCP server processes gone, its evaluation queued,
then (after the evaluation) its trace exported; the judge sees only runs that answered.

The paths are driven as they happen: the real loop with a scripted model (not our code) and a
real MCP server process, the services a page calls, the reaper, a worker's failed claim."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from feedback import services
from feedback.agent.checkpoint import reap_stale_runs
from feedback.agent.llm import LLMError, LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.evaluation.chain import evaluate_run
from feedback.models import Run, ToolConfirmation

from .conftest import mcp_server_processes
from .factories import make_run

pytestmark = pytest.mark.django_db

EVALUATE = "feedback.tasks.run_evaluate_task"
EXPORT = "feedback.tasks.run_export_task"
EXECUTE = "feedback.tasks.run_execute_task"


class Script:
    """A stand-in for the LLM: each turn's reply from a list; a callable is called first (it may
    act as a person would meanwhile, or raise)."""

    backend = name = "scripted"

    def __init__(self, *replies):
        self.replies = list(replies)

    def complete(self, messages, tools):
        reply = self.replies.pop(0)
        return reply() if callable(reply) else reply


def call(name: str, **arguments) -> LLMReply:
    return LLMReply(tool_calls=[ToolCall(f"c-{name}-{len(json.dumps(arguments))}", name, json.dumps(arguments))])


ADD = call("team__add", a=2, b=3)  # opens an MCP session: a server process the run holds


def leftover(run: Run) -> ToolConfirmation:
    """A pending confirmation the run still has when it ends: run_end withdraws whatever is."""
    return ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="left", tool_name="send_reply", arguments={})


def then(action, reply: LLMReply):
    def act():
        action()
        return reply

    return act


def _run_with_leftover(**fields) -> Run:
    run = make_run(text="Add 2 and 3", **fields)
    leftover(run)
    return run


# Each path: (set-up and end, status it ends with, who ended it).
def answered(staff, settings):
    run = _run_with_leftover()
    execute_run(run.pk, model=Script(ADD, LLMReply(content="2 + 3 = 5")))
    return run, Run.Status.SUCCEEDED, None


def failed_by_giving_up(staff, settings):
    settings.AGENT_MAX_IDENTICAL_FAILURES = 2
    run = _run_with_leftover()
    missing = call("read_text_file", path="missing.txt")
    execute_run(run.pk, model=Script(ADD, missing, missing, missing))
    return run, Run.Status.FAILED, None


def failed_at_the_step_limit(staff, settings):
    settings.AGENT_MAX_STEPS = 2
    run = _run_with_leftover()
    execute_run(run.pk, model=Script(ADD, call("calculator", expression="1+1"), call("calculator", expression="2+2")))
    return run, Run.Status.FAILED, None


def raising(error: Exception):
    def reply():
        raise error

    return reply


def failed_on_a_model_error(staff, settings):
    run = _run_with_leftover()
    execute_run(run.pk, model=Script(ADD, raising(LLMError("AuthenticationError (401): bad key"))))
    return run, Run.Status.FAILED, None


def failed_on_unusable_replies(staff, settings):
    run = _run_with_leftover()
    execute_run(run.pk, model=Script(ADD, *[LLMReply(content="")] * 3))
    return run, Run.Status.FAILED, None


def crashed(staff, settings):
    run = _run_with_leftover()
    execute_run(run.pk, model=Script(ADD, raising(RuntimeError("a bug in the loop"))))
    return run, Run.Status.FAILED, None


def cancelled_from_the_page_while_running(staff, settings):
    run = _run_with_leftover(user=staff)
    # A person cancels while the model thinks: the loop reads the flag at its next turn.
    cancel = then(lambda: services.run_cancel(run=run, user=staff), call("calculator", expression="1+1"))
    execute_run(run.pk, model=Script(ADD, cancel, LLMReply(content="never asked")))
    return run, Run.Status.CANCELLED, None


def cancelled_from_the_page_while_queued(staff, settings):
    run = _run_with_leftover(user=staff)
    assert services.run_cancel(run=run, user=staff)
    execute_run(run.pk)  # its message, delivered afterwards: nothing more happens
    return run, Run.Status.CANCELLED, staff


def cancelled_from_the_page_while_awaiting_confirmation(staff, settings):
    run = make_run(text="Reply to the customer", user=staff)
    execute_run(run.pk, model=Script(ADD, call("send_reply", to="a@example.com", subject="s", body="b")))
    run.refresh_from_db()
    assert run.status == Run.Status.AWAITING_CONFIRMATION
    assert services.run_cancel(run=run, user=staff)
    return run, Run.Status.CANCELLED, staff


def cancelled_while_the_loop_asks_for_a_confirmation(staff, settings):
    run = make_run(text="Reply to the customer", user=staff)
    # The cancel comes before the pause: the run never waits, its next turn ends it.
    reply = call("send_reply", to="a@example.com", subject="s", body="b")
    execute_run(run.pk, model=Script(ADD, then(lambda: services.run_cancel(run=run, user=staff), reply)))
    return run, Run.Status.CANCELLED, None


def cancelled_while_queued_seen_by_the_worker(staff, settings):
    run = _run_with_leftover(cancel_requested=True)  # its cancel asked while its message waited
    execute_run(run.pk)
    return run, Run.Status.CANCELLED, None


def cancelled_while_its_worker_was_gone(staff, settings, sent_tasks):
    # Its worker died with a cancel pending: the reaper re-queues it, a worker's failed claim ends it.
    stale = timezone.now() - timedelta(hours=1)
    run = _run_with_leftover(status=Run.Status.RUNNING, worker="dead", heartbeat_at=stale, cancel_requested=True)
    assert reap_stale_runs() == [run.pk]
    execute_run(run.pk)
    return run, Run.Status.CANCELLED, None


PATHS = [
    answered,
    failed_by_giving_up,
    failed_at_the_step_limit,
    failed_on_a_model_error,
    failed_on_unusable_replies,
    crashed,
    cancelled_from_the_page_while_running,
    cancelled_from_the_page_while_queued,
    cancelled_from_the_page_while_awaiting_confirmation,
    cancelled_while_the_loop_asks_for_a_confirmation,
    cancelled_while_queued_seen_by_the_worker,
    cancelled_while_its_worker_was_gone,
]


# Runs no worker ever held: no MCP server is started for them.
UNHELD = {
    cancelled_from_the_page_while_queued,
    cancelled_while_queued_seen_by_the_worker,
    cancelled_while_its_worker_was_gone,
}


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_every_way_a_run_ends_leaves_the_same_after_effects(
    path, request, staff, settings, sent_tasks, judge_server, django_capture_on_commit_callbacks
):
    settings.OTEL_EXPORT_RUNS = True
    if path not in UNHELD:
        request.getfixturevalue("mcp_stdio")
    with django_capture_on_commit_callbacks(execute=True):
        if path is cancelled_while_its_worker_was_gone:
            run, status, by = path(staff, settings, sent_tasks)
        else:
            run, status, by = path(staff, settings)
    run.refresh_from_db()
    answered_run = status == Run.Status.SUCCEEDED

    assert (run.status, run.finished_at is not None) == (status, True), run.error
    # Without an answer the outcome is decided by the end itself; an answer waits for its evaluation.
    assert run.outcome == (Run.Outcome.UNKNOWN if answered_run else Run.Outcome.NOT_ACCOMPLISHED)
    assert [args for name, args, _ in sent_tasks if name == EVALUATE] == [(run.pk,)]  # queued once, on commit
    assert mcp_server_processes() == []
    confirmations = list(run.confirmations.all())
    assert confirmations and {c.status for c in confirmations} == {ToolConfirmation.Status.WITHDRAWN}
    for confirmation in confirmations:
        assert confirmation.decided_at is not None and confirmation.decided_by == by
        assert confirmation.reason == (
            "The run was cancelled." if status == Run.Status.CANCELLED else f"The run ended ({status})."
        )

    # Its evaluation, as the worker runs it: the judge (an LLM here) only for an answer; the
    # trace exported once the first round is in.
    asked = len(judge_server.requests)
    with django_capture_on_commit_callbacks(execute=True):
        rows = evaluate_run(run.pk)
    run.refresh_from_db()
    assert rows and run.score is not None
    assert ("judge" in {r.kind for r in rows}, len(judge_server.requests) - asked) == (
        (True, 1) if answered_run else (False, 0)
    )
    assert run.outcome == (Run.Outcome.ACCOMPLISHED if answered_run else Run.Outcome.NOT_ACCOMPLISHED)
    assert [args for name, args, _ in sent_tasks if name == EXPORT] == [(run.pk,)]


def test_a_second_end_changes_nothing(staff, sent_tasks, django_capture_on_commit_callbacks):
    run = make_run(user=staff)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_cancel(run=run, user=staff)
        assert not services.run_cancel(run=run, user=staff)  # ended already
        execute_run(run.pk)  # a late message finds it ended
    ended = Run.objects.get(pk=run.pk)
    assert (ended.status, ended.error) == (Run.Status.CANCELLED, "Cancelled by a user.")
    assert [name for name, _, _ in sent_tasks] == [EVALUATE]


def test_a_running_run_s_cancel_is_only_asked_and_its_loop_reads_it_at_each_turn(
    staff, django_capture_on_commit_callbacks
):
    run = make_run(user=staff)
    flags = []

    def cancel_and_look():
        assert services.run_cancel(run=run, user=staff)  # running: asked, not ended yet
        flags.append(Run.objects.values_list("status", "cancel_requested").get(pk=run.pk))
        return call("calculator", expression="1+1")

    with django_capture_on_commit_callbacks(execute=True):
        execute_run(run.pk, model=Script(call("calculator", expression="2+2"), cancel_and_look))
    run.refresh_from_db()
    assert flags == [(Run.Status.RUNNING, True)]
    # The turn after the cancel wrote its steps (model call, tool call), then the next one read the flag
    # and ended the run before calling the model again.
    assert (run.status, run.step_count) == (Run.Status.CANCELLED, 4)
    assert list(run.steps.order_by("index").values_list("kind", flat=True)) == ["thought", "tool_call"] * 2
    assert run.error == "Cancelled by a user."


def test_a_stale_run_the_reaper_re_queues_resumes_and_ends_once(sent_tasks, django_capture_on_commit_callbacks):
    stale = timezone.now() - timedelta(hours=1)
    run = make_run(status=Run.Status.RUNNING, worker="dead", heartbeat_at=stale)
    with django_capture_on_commit_callbacks(execute=True):
        assert reap_stale_runs() == [run.pk]
        execute_run(run.pk, model=Script(LLMReply(content="4")))
    run.refresh_from_db()
    assert (run.status, run.final_output) == (Run.Status.SUCCEEDED, "4")
    assert [name for name, _, _ in sent_tasks] == [EXECUTE, EVALUATE]
