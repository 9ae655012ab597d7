"""Trust: one person's uploads stay theirs, no run is served another run's files from the cache,
and no tool result, however absurd, ends a run."""

import json
import pickle
import re
from dataclasses import replace

import pytest
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from feedback import roles, services
from feedback.agent import invoker
from feedback.agent.breaker import CircuitBreaker
from feedback.agent.llm import LLMReply, ToolCall
from feedback.agent.loop import execute_run
from feedback.agent.tools import BUILTIN_TOOLS, Tool, ToolContext, ToolError
from feedback.agent.tools.calculator import calculator
from feedback.models import Run, Step, Task, Workspace
from feedback.privacy import email_pseudonym

from .conftest import make_user
from .factories import make_run
from .test_hostile_input import ScriptedModel

pytestmark = pytest.mark.django_db
SUBMIT = reverse("feedback-task-submit")
CTX = ToolContext(run_id=0, workspace=None)  # type: ignore[arg-type]
SECRET = "Alice's salary is 91,000; write to alice@example.com"


def _call(name: str, raw: str) -> LLMReply:
    return LLMReply(tool_calls=[ToolCall(f"c-{name}", name, raw)])


def _run_one_call(run: Run, name: str, raw: str, tools: dict[str, Tool] | None = None) -> Step:
    """Run ``run`` on a model that makes one call and then answers; the run must reach its answer."""
    execute_run(run.pk, model=ScriptedModel([_call(name, raw)]), tools=tools)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED and run.final_output == "Done."
    return run.steps.get(tool_name=name)


# --- uploads belong to their author ------------------------------------------------------------
@pytest.fixture
def alices_upload(client, demo_workspace) -> Workspace:
    """Staff member Alice submits a task with a file: a workspace of her own is made for it."""
    alice = make_user("alice", roles.STAFF)
    client.force_login(alice)
    upload = SimpleUploadedFile("salaries.txt", SECRET.encode(), content_type="text/plain")
    response = client.post(SUBMIT, {"kind": "file_analysis", "text": "Summarise salaries.txt", "files": [upload]})
    assert response.status_code == 302
    client.logout()
    return Run.objects.get(task__created_by=alice).task.workspace


def _picker(client, user) -> str:
    client.force_login(user)
    return client.get(SUBMIT).content.decode()


def test_another_staff_member_is_not_offered_someone_s_uploads(client, alices_upload, staff):
    html = _picker(client, staff)
    assert ">demo</option>" in html  # the shared workspace is everyone's
    assert alices_upload.name not in html
    assert alices_upload.owner.username == "alice"


def test_a_crafted_post_naming_someone_s_uploads_is_refused_and_creates_nothing(client, alices_upload, staff):
    before = (Task.objects.count(), Run.objects.count(), Workspace.objects.count())
    client.force_login(staff)
    response = client.post(SUBMIT, {"kind": "file_analysis", "text": "Summarise salaries.txt",
                                    "workspace": alices_upload.pk})  # fmt: skip
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert (Task.objects.count(), Run.objects.count(), Workspace.objects.count()) == before


def test_the_service_refuses_someone_s_uploads_whoever_calls_it(alices_upload, staff):
    before = (Task.objects.count(), Run.objects.count())
    with pytest.raises(PermissionDenied):
        services.task_submit(user=staff, text="Summarise salaries.txt", kind="file_analysis", workspace=alices_upload)
    # A task that picked them while anyone could is not re-run on them either.
    leaked = make_run(user=staff, text="Summarise salaries.txt", workspace=alices_upload)
    with pytest.raises(PermissionDenied):
        services.run_rerun(run=leaked, user=staff)
    assert (Task.objects.count(), Run.objects.count()) == (before[0] + 1, before[1] + 1)  # only the made-up one


def test_the_author_is_offered_and_reuses_their_uploads(client, alices_upload):
    alice = alices_upload.owner
    assert alices_upload.name in _picker(client, alice)
    response = client.post(SUBMIT, {"kind": "file_analysis", "text": "Count the words of salaries.txt",
                                    "workspace": alices_upload.pk})  # fmt: skip
    assert response.status_code == 302
    assert Run.objects.filter(task__created_by=alice, task__workspace=alices_upload).count() == 2
    again = services.run_rerun(run=Run.objects.filter(task__created_by=alice).first(), user=alice)
    assert again.task.workspace == alices_upload


def test_a_reviewer_sees_uses_and_re_runs_on_a_staff_member_s_uploads(client, alices_upload):
    # A reviewer who also submits tasks (reviewers read every run, so every run's files).
    reviewer = make_user("rita", roles.REVIEWER, roles.STAFF)
    assert f"{alices_upload.name} (uploads of alice)" in _picker(client, reviewer)
    response = client.post(SUBMIT, {"kind": "file_analysis", "text": "Check salaries.txt",
                                    "workspace": alices_upload.pk})  # fmt: skip
    assert response.status_code == 302
    assert Run.objects.get(task__created_by=reviewer).task.workspace == alices_upload
    alices_run = Run.objects.get(task__created_by=alices_upload.owner)
    response = client.post(reverse("feedback-run-rerun", args=[alices_run.pk]))
    assert response.status_code == 302
    assert Run.objects.get(retry_of=alices_run).task.workspace == alices_upload


# --- the tool cache never crosses sandboxes ----------------------------------------------------
@pytest.fixture
def two_runs(settings):
    """Two runs whose workspaces hold different files at the same path."""
    runs = []
    for name, text in [("alices", SECRET), ("bobs", "Bob's own notes.")]:
        root = settings.WORKSPACES_ROOT / name
        root.mkdir(parents=True)
        (root / "notes.txt").write_text(text)
        runs.append(make_run(text="Read notes.txt", kind=Task.Kind.FILE_ANALYSIS,
                             workspace=Workspace.objects.create(name=name)))  # fmt: skip
    return runs


class _RecordingCache:
    """The real cache, with a copy of every value written to it."""

    def __init__(self, real):
        self.real, self.written = real, []

    def set(self, key, value, *args, **kwargs):
        self.written.append(pickle.dumps(value))
        return self.real.set(key, value, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _read_notes(run: Run, tools: dict[str, Tool] | None = None) -> Step:
    return _run_one_call(run, "read_text_file", '{"path": "notes.txt"}', tools)


def test_an_open_breaker_never_serves_another_run_s_file(two_runs, settings, monkeypatch):
    alices, bobs = two_runs
    recording = _RecordingCache(invoker.cache)
    monkeypatch.setattr(invoker, "cache", recording)
    assert "91,000" in _read_notes(alices).result["text"]
    settings.TOOL_BREAKER_FAILURES = 1
    CircuitBreaker("read_text_file").record_failure()  # as another worker's failing read would
    step = _read_notes(bobs)
    assert not step.success and step.error_class == "CircuitOpen"
    assert "91,000" not in json.dumps([step.result, step.error])
    # What the cache keeps is masked, as the steps are.
    assert recording.written
    assert all(b"alice@example.com" not in value for value in recording.written)
    assert any(email_pseudonym("alice@example.com").encode() in value for value in recording.written)


def test_a_cached_result_never_serves_another_run_s_file(two_runs):
    alices, bobs = two_runs
    # read_text_file with a result cache, as an operator might configure one.
    tools = {"read_text_file": replace(BUILTIN_TOOLS["read_text_file"], cache_ttl=60)}
    assert "91,000" in _read_notes(alices, tools).result["text"]
    step = _read_notes(bobs, tools)
    assert step.success and not step.cached
    assert step.result["text"] == "Bob's own notes."


def test_results_that_depend_only_on_their_arguments_are_still_shared(tmp_path):
    first = invoker.invoke("calculator", '{"expression": "6 * 7"}', ToolContext(1, tmp_path / "a"), BUILTIN_TOOLS)
    second = invoker.invoke("calculator", '{"expression": "6 * 7"}', ToolContext(2, tmp_path / "b"), BUILTIN_TOOLS)
    assert (first.result["value"], second.result["value"]) == (42, 42)
    assert (first.cached, second.cached) == (False, True)


# --- no tool result ends a run -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("(10**1000)**5", "too large: the calculator works with numbers of up to 1000 digits"),
        ("9**9**9", "exponent is too large"),
        ("(2**999)**999", "too large"),
        ("99999999999999999999999 ** 1000", "too large"),
        ("(10**500) * (10**500)", "too large"),
        ("10**999 * 10", "too large"),
        ("(10**100)*(10**100)*(10**100)*(10**100)*(10**100)*(10**100)*(10**100)*(10**100)*(10**100)*(10**100)",
         "too large"),
        ("round(5, -10**9)", "round() takes at most 1000 digits"),
        ("min(10**999, 10**998) * 100", "too large"),
        ("sqrt(10**999)", "too large for this operation"),
        ("10**999 / 3", "too large for this operation"),
        ("(-8) ** 0.5", "not a real number"),
    ],
)  # fmt: skip
def test_calculator_blowups_are_refused_with_a_clear_error(expression, message):
    with pytest.raises(ToolError, match=re.escape(message)):
        calculator(CTX, expression)
    # Up to the limit it still computes exactly.
    assert calculator(CTX, "(10**500) * (10**499)")["value"] == 10**999


def test_a_calculator_blowup_is_an_observation_and_the_run_goes_on(db):
    step = _run_one_call(make_run(text="What is (10**1000)**5?"), "calculator", '{"expression": "(10**1000)**5"}')
    assert step.success is False and step.error_class == "ToolError"
    assert "up to 1000 digits" in step.error


def test_a_tool_result_that_cannot_be_recorded_is_an_observation(db):
    schema = {"type": "object", "properties": {}}
    huge = Tool("huge", "returns a number too long to print", schema, lambda ctx: {"value": 10**5000})
    step = _run_one_call(make_run(text="Use the huge tool"), "huge", "{}", {"huge": huge})
    assert step.success is False and step.error_class == "UnrecordableResult"
    assert "huge returned a result that cannot be recorded" in step.error


def test_arguments_nested_too_deep_to_record_are_an_observation(db):
    deep = '{"expression": ' + "[" * 1100 + "]" * 1100 + "}"
    step = _run_one_call(make_run(text="What is 1 + 1?"), "calculator", deep)
    assert step.success is False and step.error_class == "UnrecordableCall"
    assert "could not be recorded" in step.error and step.arguments == deep
