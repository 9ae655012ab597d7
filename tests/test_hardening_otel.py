"""What reaches an OTLP receiver after a run's export (tests/otlp_receiver.py, real protobuf over
real HTTP): a later evaluation as a span of its own, never the run's spans again (receivers such
as Phoenix keep the first copy of a span id); a re-run in the session of the first run."""

import pytest

from agentsite.celery import app
from feedback import otel_export, queue, services, tasks
from feedback.agent.loop import execute_run
from feedback.models import Evaluation, Run
from feedback.privacy import email_pseudonym

from .factories import make_run
from .test_otel_export import receiver  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db

# The tasks a worker would run here, by name: a run's evaluation and the exports that follow it
# (feedback.tasks registers them).
WORK = {queue.RUN_EVALUATE, queue.RUN_EXPORT, f"{tasks.__name__}.evaluations_export_task"}


@pytest.fixture
def exporting(request, settings):
    """The OTLP receiver of tests/test_otel_export.py, with the export on."""
    settings.OTEL_EXPORT_RUNS = True
    return request.getfixturevalue("receiver")


@pytest.fixture
def worker(sent_tasks, django_capture_on_commit_callbacks):
    """Runs what was queued since its last call, as a worker would, and what that queues."""
    done = 0

    def work_off() -> None:
        nonlocal done
        while done < len(sent_tasks):
            name, args, kwargs = sent_tasks[done]
            done += 1
            if name in WORK:
                with django_capture_on_commit_callbacks(execute=True):
                    assert app.tasks[name].apply(args=args, kwargs=kwargs).successful()

    return work_off


def ended_and_exported(exporting, worker, django_capture_on_commit_callbacks) -> tuple[Run, dict]:
    """A run that ended, was evaluated and exported, and its spans as the exporting got them."""
    run = make_run(text="What is 6 * 7?")
    with django_capture_on_commit_callbacks(execute=True):
        execute_run(run.pk)
    worker()
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.evaluations.exists()
    first = {span.span_id: span for span in exporting.spans}
    assert len(first) == len(exporting.spans) > 1
    return run, first


def root_of(spans) -> object:
    (root,) = [s for s in spans if s.name.startswith("invoke_agent")]
    return root


def assert_never_sent_again(exporting, first: dict) -> None:
    """Every span of the run's export arrived once: never again, changed or not."""
    copies = [span for span in exporting.spans if span.span_id in first]
    assert copies == list(first.values())


def test_a_reviewers_later_score_arrives_as_a_span_of_its_own(
    exporting, worker, reviewer, django_capture_on_commit_callbacks
):
    run, first = ended_and_exported(exporting, worker, django_capture_on_commit_callbacks)
    root = root_of(first.values())

    with django_capture_on_commit_callbacks(execute=True):
        scored = services.run_add_human_score(
            run=run, user=reviewer, score=0.25, comment="Too slow.", outcome="not_accomplished"
        )
    worker()

    (span,) = exporting.spans[len(first) :]
    assert span.span_id not in first  # an id of its own: a exporting that keeps first copies keeps it
    assert (span.trace_id, span.parent_id, span.links) == (root.trace_id, root.span_id, [(root.trace_id, root.span_id)])
    assert span.name == "evaluation human"
    assert (
        span.attributes.items()
        >= {
            "openinference.span.kind": "EVALUATOR",
            "langfuse.observation.type": "evaluator",
            "evaluations.0.evaluation.name": "human",
            "evaluations.0.evaluation.score": 0.25,
            "evaluations.0.evaluation.label": "not_accomplished",
            "evaluations.0.evaluation.annotator_kind": "HUMAN",
            "evaluations.0.evaluation.identifier": f"evaluation-{scored.pk}",
            "gen_ai.evaluation.name": "human",
            "gen_ai.evaluation.score.value": 0.25,
            "gen_ai.conversation.id": str(run.pk),
        }.items()
    )
    assert not {"evaluations.0.evaluation.explanation", "gen_ai.evaluation.explanation"} & set(span.attributes)
    [(event, values, _)] = span.events
    assert (event, values["gen_ai.evaluation.score.value"]) == ("gen_ai.evaluation.result", 0.25)
    assert_never_sent_again(exporting, first)

    # Another score: another span, another id; the first score's span is not sent again.
    with django_capture_on_commit_callbacks(execute=True):
        services.run_add_human_score(run=run, user=reviewer, score=0.5)
    worker()
    second = exporting.spans[len(first) + 1 :]
    assert [(s.attributes["evaluations.0.evaluation.score"], s.span_id != span.span_id) for s in second] == [
        (0.5, True)
    ]
    assert_never_sent_again(exporting, first)


def test_a_re_evaluation_arrives_as_spans_of_its_own(exporting, worker, reviewer, django_capture_on_commit_callbacks):
    run, first = ended_and_exported(exporting, worker, django_capture_on_commit_callbacks)
    root = root_of(first.values())
    before = {e["gen_ai.evaluation.name"] for name, e, _ in root.events if name == "gen_ai.evaluation.result"}

    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_reevaluate(run=run, user=reviewer) == 2
    worker()

    later = exporting.spans[len(first) :]
    round_two = Evaluation.objects.filter(run=run, round=2)
    assert round_two.exists()
    assert sorted(s.attributes["evaluations.0.evaluation.identifier"] for s in later) == sorted(
        f"evaluation-{e.pk}" for e in round_two
    )
    assert all(s.span_id not in first and s.parent_id == root.span_id for s in later)
    assert {s.attributes["agent_feedback.evaluation.round"] for s in later} == {2}
    assert {s.attributes["evaluations.0.evaluation.name"] for s in later} == before
    assert {s.attributes["evaluations.0.evaluation.annotator_kind"] for s in later} <= {"CODE", "LLM"}
    assert_never_sent_again(exporting, first)


def test_a_later_score_sends_its_comment_only_as_captured_content(
    exporting, worker, reviewer, settings, django_capture_on_commit_callbacks
):
    settings.OTEL_CAPTURE_CONTENT = True
    run, first = ended_and_exported(exporting, worker, django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        services.run_add_human_score(run=run, user=reviewer, score=0.5, comment="Ask ada@example.com first.")
    worker()

    (span,) = exporting.spans[len(first) :]
    explanation = span.attributes["evaluations.0.evaluation.explanation"]
    assert explanation == span.attributes["gen_ai.evaluation.explanation"]
    assert "ada@example.com" not in explanation and email_pseudonym("ada@example.com") in explanation


def test_a_re_run_is_in_the_session_of_the_first_run_of_its_chain(exporting, staff):
    first = make_run(user=staff, text="What is 6 * 7?")
    execute_run(first.pk)
    rerun = services.run_rerun(run=first, user=staff)
    execute_run(rerun.pk)
    rerun_of_rerun = services.run_rerun(run=rerun, user=staff)
    execute_run(rerun_of_rerun.pk)
    assert len({first.task_id, rerun.task_id, rerun_of_rerun.task_id}) == 3  # a new task row each time

    for run in (first, rerun, rerun_of_rerun):
        otel_export.run_trace_export(run_id=run.pk)
    roots = [s for s in exporting.spans if s.name.startswith("invoke_agent")]

    assert [r.attributes["agent_feedback.run.id"] for r in roots] == [first.pk, rerun.pk, rerun_of_rerun.pk]
    assert [r.attributes["session.id"] for r in roots] == [f"task-{first.task_id}"] * 3
    assert len({r.trace_id for r in roots}) == 3  # each run its own trace, in the one session
    assert [r.attributes.get("agent_feedback.run.retry_of") for r in roots] == [None, first.pk, rerun.pk]
