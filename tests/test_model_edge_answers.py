"""What the loop takes for an answer: a reply repeating one of the runtime's instructions is none,
even after it was told so; a reply reporting a tool's error is an answer, not an echo of the
instruction (issue 23.6); a guardrail's refusal is the runtime's message to the model and never
becomes the answer a person reads (issue 23.4). Through the loop, on the local OpenAI-compatible
server with the real openai SDK, and on the offline demo model."""

import json

import pytest

from feedback.agent.loop import execute_run
from feedback.models import Run, Step, Task

from .factories import make_run
from .fake_openai import call, completion
from .test_llm_endpoint import run_task
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db

NO_SUCH_FILE = (
    "No such file: 'release-notes.txt'. The files nearest to it are \"docs/meeting-notes.md, docs/release-notes.txt, "
    "inbox/001-invoice-twice.txt, inbox/002-site-down.txt, inbox/003-password-reset.txt, "
    'inbox/004-feature-question.txt, inbox/005-locked-account.txt, inbox/006-refund-status.txt, report.txt": '
    "read one of them by its path."
)
PRECONDITION = [{"type": "tool_precondition", "tool": "read_text_file", "requires": "list_directory"}]


def summarise(workspace) -> Run:
    run = make_run(text="Summarise release-notes.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    return run


def error_classes(run: Run) -> list[str]:
    return list(run.steps.filter(kind=Step.Kind.MODEL_ERROR).values_list("error_class", flat=True))


def with_the_precondition() -> None:
    strategy = make_strategy(status="active")
    strategy.current_version.guardrails = PRECONDITION
    strategy.current_version.save()


# --- an echo of the runtime's instruction is no answer -------------------------------------------
def test_a_reply_that_copies_the_runtimes_instruction_is_not_the_answer(endpoint):
    # After a failed call Qwen2.5-Coder-1.5B answered with the reflection's own closing sentence
    # (then a re-plan instruction) in 19 of 22 runs, which ended each run "succeeded" with it as the answer.
    endpoint.script = [
        completion(tool_calls=[call("calculator", {"expression": "2 +"})]),
        completion("Think about why it failed, then try another way."),
        completion(tool_calls=[call("calculator", {"expression": "2 + 2"})]),
        completion("The failed step is marked; another way gives 2 + 2 = 4."),
    ]
    run = run_task()
    assert run.final_output == "The failed step is marked; another way gives 2 + 2 = 4."
    echo = run.steps.get(kind=Step.Kind.MODEL_ERROR)
    assert echo.error_class == "EchoedInstruction" and "repeated the instruction" in echo.error
    assert "repeated the instruction" in json.dumps(endpoint.requests[2]["messages"])  # the model is told


def test_the_same_echo_after_the_correction_is_still_not_the_answer(endpoint):
    # Measured on the local model (file analysis, temperature 0): after "your reply repeated the
    # instruction" it sent the reflection's sentence again, which was compared with the correction
    # alone and became the run's answer.
    echo = "Think about why it failed, then try another way."
    endpoint.script = [
        completion(tool_calls=[call("calculator", {"expression": "2 +"})]),
        completion(echo),
        completion(echo),
        completion("2 + 2 = 4."),
    ]
    run = run_task()
    assert run.final_output == "2 + 2 = 4."
    errors = list(run.steps.filter(kind=Step.Kind.MODEL_ERROR).values_list("error_class", flat=True))
    assert errors == ["EchoedInstruction", "EchoedInstruction"]


def test_echoing_the_instructions_three_times_fails_the_run_without_an_answer(endpoint):
    echo = "Think about why it failed, then try another way."
    endpoint.script = [completion(tool_calls=[call("calculator", {"expression": "2 +"})])] + [completion(echo)] * 3
    run = run_task()
    assert (run.status, run.final_output) == (Run.Status.FAILED, "")
    assert run.error == "The model gave 3 unusable replies in a row."


def test_an_answer_that_quotes_a_phrase_of_the_instruction_is_the_answer(endpoint):
    endpoint.script = [
        completion(tool_calls=[call("calculator", {"expression": "2 +"})]),
        completion("I chose another way: the sum 2 + 2 is 4, so the answer is 4."),
    ]
    assert run_task().final_output == "I chose another way: the sum 2 + 2 is 4, so the answer is 4."


def test_a_piece_of_a_correction_is_not_the_answer(endpoint):
    # Run 7 on the local model (file analysis): told "Your reply wrote tool calls as text instead of
    # making them: call tools, or answer in words.", it answered "call tools", and the run ended
    # succeeded with that answer.
    endpoint.script = [
        completion('<tools><function name="calculator"></function></tools>'),
        completion("call tools"),
        completion("Four, exactly"),
    ]
    run = run_task()
    assert error_classes(run) == ["MalformedReply", "EchoedInstruction"]
    assert (run.status, run.final_output) == (Run.Status.SUCCEEDED, "Four, exactly")


@pytest.mark.parametrize("answer", ["in words", "answer 4", "no such file"])
def test_a_short_answer_is_an_answer_unless_it_is_a_piece_of_a_correction(endpoint, demo_workspace, answer):
    # "in words" is a piece of the correction; "answer 4" has a figure; "no such file" a tool said.
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})]),
        completion('<tools><function name="calculator"></function></tools>'),
        completion(answer),
        completion("The file is missing."),
    ]
    run = summarise(demo_workspace)
    echoed = answer == "in words"
    assert run.final_output == ("The file is missing." if echoed else answer)
    assert error_classes(run) == ["MalformedReply", "EchoedInstruction"][: 2 if echoed else 1]


# --- 23.6: an answer reporting a tool's error is no echo -------------------------------------------
def test_the_readmes_failing_example_is_answered_without_an_echo(demo_workspace):
    # The offline model misses docs/ and says it could not find the file, quoting the tool's error
    # the reflection had quoted: that was flagged EchoedInstruction and asked for again.
    run = summarise(demo_workspace)
    assert run.status == Run.Status.SUCCEEDED
    assert run.final_output == f"I could not find release-notes.txt: {NO_SUCH_FILE}"
    assert error_classes(run) == []


@pytest.mark.parametrize(
    "answer",
    [
        f"I could not read release-notes.txt: {NO_SUCH_FILE}",  # the tool's error, as the reflection quoted it
        "The workspace has no release-notes.txt, so there is nothing to summarise.",  # in its own words
    ],
)
def test_a_reply_reporting_the_tool_error_is_the_answer(endpoint, demo_workspace, answer):
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})]),
        completion(answer),
    ]
    run = summarise(demo_workspace)
    assert run.steps.filter(kind=Step.Kind.REFLECTION).exists()  # the error was quoted back to the model
    assert (run.status, run.final_output, error_classes(run)) == (Run.Status.SUCCEEDED, answer, [])


def test_a_reply_copying_the_instruction_is_still_an_echo(endpoint, demo_workspace):
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})]),
        completion("Use a path the error names, exactly as written; if none fits, list the directory."),
        completion("There is no release-notes.txt in the workspace."),
    ]
    run = summarise(demo_workspace)
    assert error_classes(run) == ["EchoedInstruction"]
    assert run.final_output == "There is no release-notes.txt in the workspace."


# --- the next step announced, not taken ----------------------------------------------------------
def test_a_next_step_announced_after_an_error_is_taken_not_answered(endpoint, demo_workspace):
    # Run 13 on the local model (triage): after the missing file's error named the inbox's files, 6
    # of 12 runs answered "To resolve the issue, I will read the file named ..." and ended with it.
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})]),
        completion("To resolve the issue, I will read the file named docs/release-notes.txt."),
        completion(tool_calls=[call("read_text_file", {"path": "docs/release-notes.txt"})]),  # forced
        completion("The release notes announce version 2.0."),
    ]
    run = summarise(demo_workspace)
    assert endpoint.requests[2]["tool_choice"] == {"type": "function", "function": {"name": "read_text_file"}}
    reads = run.steps.filter(tool_name="read_text_file").order_by("index")
    assert [(s.arguments["path"], s.success) for s in reads] == [
        ("release-notes.txt", False),
        ("docs/release-notes.txt", True),
    ]
    assert run.status == Run.Status.SUCCEEDED and error_classes(run) == []
    assert run.final_output == "The release notes announce version 2.0."


# --- 23.4: guardrail text never becomes a user's answer --------------------------------------------
def test_an_answer_quoting_a_refusal_is_asked_for_again(endpoint, demo_workspace):
    with_the_precondition()
    refused = (
        "Guardrail: call list_directory successfully before read_text_file (a rule learned from earlier failures)."
    )
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "docs/release-notes.txt"})]),
        completion(f"I could not find release-notes.txt: {refused}"),
        completion(tool_calls=[call("list_directory", {"path": "docs"})]),
        completion(tool_calls=[call("read_text_file", {"path": "docs/release-notes.txt"})]),
        completion("The release notes announce version 2.0."),
    ]
    run = summarise(demo_workspace)
    assert run.status == Run.Status.SUCCEEDED and run.final_output == "The release notes announce version 2.0."
    assert error_classes(run) == ["QuotedRefusal"]
    # The model saw the refusal marked as the runtime's rule, then was told not to quote it.
    observation = json.loads(next(m for m in endpoint.requests[1]["messages"] if m["role"] == "tool")["content"])
    assert observation["refused_by"] == "guardrail" and observation["error"] == refused
    told = endpoint.requests[2]["messages"][-1]
    assert told["role"] == "user" and "quoted a guardrail's refusal" in told["content"]


def test_a_model_that_keeps_quoting_the_refusal_never_answers_with_it(endpoint, demo_workspace):
    with_the_precondition()
    endpoint.script = [completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})])]
    endpoint.responder = lambda body: completion("Sorry: Guardrail: call list_directory successfully first.")
    run = summarise(demo_workspace)
    assert run.status == Run.Status.FAILED and run.final_output == ""
    assert run.error == "The model gave 3 unusable replies in a row."
    assert error_classes(run) == ["QuotedRefusal"] * 3


def test_an_answer_naming_what_was_refused_is_an_answer(endpoint, demo_workspace):
    with_the_precondition()
    answer = "I was not allowed to read release-notes.txt before listing the workspace, so I cannot summarise it."
    endpoint.script = [
        completion(tool_calls=[call("read_text_file", {"path": "release-notes.txt"})]),
        completion(answer),
    ]
    run = summarise(demo_workspace)
    assert (run.final_output, error_classes(run)) == (answer, [])


def test_the_offline_model_never_answers_with_a_refusal(demo_workspace):
    # Issue 23.4's example: "I could not find release-notes.txt: Guardrail: call list_directory
    # successfully before read_text_file …" reached the answer.
    with_the_precondition()
    run = summarise(demo_workspace)
    refusal = run.steps.filter(error_class="GuardrailRefused").first()
    assert refusal is not None and refusal.error.startswith("Guardrail:")
    assert run.status == Run.Status.SUCCEEDED and run.final_output.startswith("I could not find release-notes.txt")
    assert "Guardrail" not in run.final_output and "successfully before" not in run.final_output
