"""The agent on the real openai SDK against a local OpenAI-compatible server."""

import pytest

from feedback.agent.loop import execute_run
from feedback.models import Run, Step, Task

from .factories import make_run
from .fake_openai import call, completion, error

pytestmark = pytest.mark.django_db


def run_task(text="What is 2 + 2?", kind=Task.Kind.ARITHMETIC, **kwargs) -> Run:
    run = make_run(text=text, kind=kind, **kwargs)
    execute_run(run.pk)
    run.refresh_from_db()
    return run


def test_tool_calls_through_the_real_sdk(endpoint):
    endpoint.script = [
        completion("Let me compute.", [call("calculator", {"expression": "2 + 2"})], usage=(50, 9)),
        completion("2 + 2 = 4", usage=(80, 6)),
    ]
    run = run_task()
    assert run.status == Run.Status.SUCCEEDED and run.final_output == "2 + 2 = 4"
    assert run.llm_backend == "openai" and run.model_name == "test-model"
    steps = list(run.steps.values_list("kind", "tool_name", "tokens_in", "tokens_out"))
    assert steps == [("thought", "", 50, 9), ("tool_call", "calculator", 0, 0), ("final", "", 80, 6)]
    assert (run.tokens_in, run.tokens_out) == (130, 15)
    first = endpoint.requests[0]
    assert first["model"] == "test-model"
    assert {t["function"]["name"] for t in first["tools"]} >= {"calculator", "read_text_file", "update_plan"}
    assert first["messages"][0]["role"] == "system" and first["messages"][1]["content"] == "What is 2 + 2?"
    tool_reply = endpoint.requests[1]["messages"][-1]
    assert tool_reply["role"] == "tool" and '"value": 4' in tool_reply["content"]
    # Content is always a string: llama-cpp-python's server refuses an assistant message's null.
    assert all(isinstance(m["content"], str) for m in endpoint.requests[1]["messages"])


def test_parallel_tool_calls_run_concurrently(endpoint, settings):
    settings.HTTP_GET_ALLOWED_HOSTS = ["127.0.0.1"]
    slow = f"http://127.0.0.1:{endpoint.port}/slow"
    endpoint.script = [
        completion(tool_calls=[call("http_get", {"url": f"{slow}/a"}), call("http_get", {"url": f"{slow}/b"})]),
        completion("Both fetched."),
    ]
    run = run_task(text="Fetch both pages", kind=Task.Kind.GENERAL)
    a, b = run.steps.filter(tool_name="http_get").order_by("index")
    assert a.success and b.success and '"/slow/a"' in a.result["text"] and a.result["status"] == 200
    assert a.duration_ms >= 300 and b.duration_ms >= 300
    # Their recorded intervals overlap: the two calls ran at the same time.
    assert a.started_at < b.finished_at and b.started_at < a.finished_at


def test_malformed_unknown_and_invalid_calls_are_recorded(endpoint):
    endpoint.script = [
        completion(tool_calls=[call("calculator", '{"expression": "1 +', id="bad-json")]),
        completion(tool_calls=[call("launch_rockets", {}, id="unknown")]),
        completion(tool_calls=[call("calculator", {"expression": 42}, id="invalid")]),
        completion("I give up on tools: 2."),
    ]
    run = run_task()
    calls = list(run.steps.filter(kind=Step.Kind.TOOL_CALL).order_by("index"))
    assert [c.tool_call_id for c in calls] == ["bad-json", "unknown", "invalid"]
    assert "not valid JSON" in calls[0].error
    assert "Unknown tool 'launch_rockets'" in calls[1].error
    assert "42 is not of type 'string'" in calls[2].error
    assert all(c.error_class == "InvalidToolCall" for c in calls)
    # The model saw each error as the tool's answer on the next turn.
    assert "Unknown tool" in endpoint.requests[2]["messages"][-2]["content"]
    assert run.status == Run.Status.SUCCEEDED


def test_a_429_is_retried_then_succeeds(endpoint):
    endpoint.script = [error(429, "slow down"), completion("4")]
    run = run_task()
    assert run.status == Run.Status.SUCCEEDED
    final = run.steps.get(kind=Step.Kind.FINAL)
    assert final.attempts == 2
    tries = list(final.attempt_rows.values_list("number", "retryable"))
    assert tries == [(1, True), (2, False)]
    assert "RateLimitError (429)" in final.attempt_rows.first().error


def test_500s_until_the_model_gives_up(endpoint):
    endpoint.script = [error(500, "boom")] * 3
    run = run_task()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("The model could not be reached after 3 attempt(s): InternalServerError (500)")
    step = run.steps.get()
    assert step.kind == Step.Kind.MODEL_ERROR and step.attempts == 3
    assert len(endpoint.requests) == 3


def test_a_client_error_is_not_retried(endpoint):
    endpoint.script = [error(401, "bad key")]
    run = run_task()
    assert run.status == Run.Status.FAILED and "(401)" in run.error
    assert len(endpoint.requests) == 1


def test_a_reply_slower_than_the_timeout(endpoint, settings):
    settings.LLM_TIMEOUT_SECONDS = 0.3
    settings.LLM_MAX_ATTEMPTS = 2
    endpoint.script = [{"json": completion("late"), "delay": 1.0}] * 2
    run = run_task()
    assert run.status == Run.Status.FAILED
    assert "APITimeoutError" in run.error and "2 attempt(s)" in run.error


def test_an_empty_reply_is_an_observation(endpoint):
    endpoint.script = [completion(""), completion("4")]
    run = run_task()
    assert list(run.steps.values_list("kind", flat=True)) == ["model_error", "final"]
    assert "empty" in endpoint.requests[1]["messages"][-1]["content"]


def test_json_fallback_for_a_server_without_tools(endpoint):
    def responder(body):
        if "tools" in body:
            return error(400, "This model does not support tools")
        if len([m for m in body["messages"] if m["role"] == "assistant"]) == 0:
            return completion('```json\n{"thought": "compute", "tool_calls": [{"name": "calculator", '
                              '"arguments": {"expression": "6*7"}}]}\n```')  # fmt: skip
        return completion('{"final_answer": "42"}')

    endpoint.responder = responder
    run = run_task(text="What is 6*7?")
    assert run.status == Run.Status.SUCCEEDED and run.final_output == "42"
    assert run.steps.get(tool_name="calculator").result["value"] == 42
    json_requests = [r for r in endpoint.requests if "tools" not in r]
    assert "Reply with ONE JSON object" in json_requests[0]["messages"][0]["content"]


def test_json_mode_malformed_reply_is_told_to_the_model(endpoint, settings):
    settings.LLM_TOOL_MODE = "json"
    endpoint.script = [completion("Sure! The answer is four."), completion('{"final_answer": "4"}')]
    run = run_task()
    error_step = run.steps.get(kind=Step.Kind.MODEL_ERROR)
    assert error_step.error_class == "MalformedReply" and "not valid JSON" in error_step.error
    assert run.final_output == "4"


def test_tools_go_with_tool_choice_and_a_reply_bound(endpoint, settings):
    # llama-cpp-python's function-calling format renders no tools unless tool_choice is given.
    settings.LLM_MAX_TOKENS = 256
    endpoint.script = [completion("4")]
    run_task()
    first = endpoint.requests[0]
    assert first["tool_choice"] == "auto" and first["tools"]
    assert first["max_tokens"] == 256


def _bounds(schema) -> set[str]:
    if isinstance(schema, dict):
        found = {k for k in schema if k in {"maxLength", "minLength", "pattern", "format", "maxItems", "minItems"}}
        return found.union(*(_bounds(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_bounds(v) for v in schema))
    return set()


@pytest.mark.parametrize(("mode", "base_url", "bounded"), [
    ("auto", "local", False), ("auto", "https://api.openai.com/v1", True), ("on", "https://api.openai.com/v1", False),
    ("off", "local", True),
])  # fmt: skip
def test_a_local_endpoint_gets_schemas_its_grammar_can_hold(endpoint, settings, mode, base_url, bounded):
    from feedback.agent.llm.adapter import grammar_safe_schemas

    settings.LLM_GRAMMAR_SAFE_SCHEMAS = mode
    if base_url != "local":
        settings.OPENAI_BASE_URL = base_url
    assert grammar_safe_schemas() is not bounded
    settings.OPENAI_BASE_URL = endpoint.base_url  # the request itself goes to the local server
    endpoint.script = [completion("4")]
    settings.LLM_GRAMMAR_SAFE_SCHEMAS = {True: "off", False: "on"}[bounded]
    run_task()
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in endpoint.requests[0]["tools"]}
    assert bool(_bounds(tools)) is bounded
    assert tools["analyze_text"]["properties"]["text"]["type"] == "string"  # only the bounds go


def test_an_argument_past_a_bound_the_model_was_not_shown_is_refused_by_the_invoker(endpoint, settings):
    settings.LLM_GRAMMAR_SAFE_SCHEMAS = "on"
    endpoint.script = [
        completion(tool_calls=[call("calculator", {"expression": "1+" * 300 + "1"})]),
        completion("The expression was too long."),
    ]
    run = run_task()
    assert "maxLength" not in str(endpoint.requests[0]["tools"])
    step = run.steps.get(kind=Step.Kind.TOOL_CALL)
    assert not step.success and step.error_class == "InvalidToolCall", step.error
    assert "too long" in step.error


def test_a_reply_cut_off_at_the_token_limit_is_an_observation(endpoint, settings):
    settings.LLM_MAX_TOKENS = 64
    cut = completion("The answer, after a long consideration of every possible")
    cut["choices"][0]["finish_reason"] = "length"
    endpoint.script = [cut, completion("4")]
    run = run_task()
    error_step = run.steps.get(kind=Step.Kind.MODEL_ERROR)
    assert error_step.error_class == "MalformedReply"
    assert "cut off at the length limit of 64 tokens" in error_step.error
    assert run.final_output == "4"
    assert "reply more briefly" in endpoint.requests[1]["messages"][-1]["content"]


def test_the_json_mode_catalogue_is_compact(endpoint, settings):
    settings.LLM_TOOL_MODE = "json"
    endpoint.script = [completion('{"final_answer": "4"}')]
    run_task()
    system = endpoint.requests[0]["messages"][0]["content"]
    assert "maxLength" not in system and '"type":"string"' in system


def test_an_active_tool_mode_guardrail_asks_its_runs_for_json_replies(endpoint):
    from feedback.models import Strategy, StrategyVersion

    strategy = Strategy.objects.create(title="JSON replies", pattern_kind="malformed_reply", status="active")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title="JSON replies", pattern="p", new_guidance="Reply in JSON.",
        condition={"task_kinds": ["arithmetic"]}, guardrails=[{"type": "tool_mode", "mode": "json"}],
    )  # fmt: skip
    strategy.save()
    endpoint.script = [completion('{"final_answer": "4"}'), completion("Hello")]
    run = run_task()
    assert run.final_output == "4"
    first = endpoint.requests[0]
    assert "tools" not in first and "Reply with ONE JSON object" in first["messages"][0]["content"]
    other = run_task(text="Say hello", kind=Task.Kind.GENERAL)  # out of the strategy's scope: native tools
    assert other.final_output == "Hello" and endpoint.requests[1]["tools"]


def test_a_tool_named_but_not_called_is_asked_for_outright(endpoint):
    # What llama-cpp-python's chatml-function-calling answers when the model picks a tool whose
    # name runs into the colon: the choice as text, no call.
    endpoint.script = [
        completion("functions.calculator:", usage=(40, 3)),
        completion(tool_calls=[call("calculator", {"expression": "2 + 2"})], usage=(41, 9)),
        completion("2 + 2 = 4"),
    ]
    run = run_task()
    assert run.final_output == "2 + 2 = 4"
    step = run.steps.get(kind=Step.Kind.TOOL_CALL)
    assert step.tool_name == "calculator" and step.result["value"] == 4
    assert endpoint.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "calculator"}}
    assert run.steps.order_by("index").first().tokens_in == 81  # both requests' tokens


@pytest.mark.parametrize(
    "reply",
    [
        "To work it out, call the calculator with 2 + 2.",
        "I will use `calculator` to compute it.",
        'Let me compute: {{"name": "calculator", "arguments": {"expression": "2 + 2"}}}',
        "calculator(expression='2 + 2')",
    ],
)
def test_a_reply_saying_which_tool_it_would_call_is_asked_for_that_call(endpoint, reply):
    # Qwen2.5-Coder-1.5B ended 33 of its 52 trial runs without a tool call this way: the reply
    # saying which tool it would call was taken for the answer.
    endpoint.script = [
        completion(reply),
        completion(tool_calls=[call("calculator", {"expression": "2 + 2"})]),
        completion("2 + 2 = 4"),
    ]
    run = run_task()
    assert run.final_output == "2 + 2 = 4"
    assert run.steps.get(kind=Step.Kind.TOOL_CALL).result["value"] == 4
    assert endpoint.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "calculator"}}


def test_an_answer_that_mentions_the_tool_it_used_is_the_answer(endpoint):
    endpoint.script = [
        completion(tool_calls=[call("calculator", {"expression": "2 + 2"})]),
        completion("I used the calculator: call calculator(2 + 2) gives 4."),
    ]
    run = run_task()
    assert run.final_output == "I used the calculator: call calculator(2 + 2) gives 4."
    assert [r.get("tool_choice") for r in endpoint.requests] == ["auto", "auto"]


def test_an_answer_that_names_no_tool_or_several_is_the_answer(endpoint):
    endpoint.script = [completion("4"), completion("Call the calculator or use analyze_text: 4.")]
    assert run_task().final_output == "4"
    assert run_task(text="What is 2 + 2, or how long is this?").final_output.endswith(": 4.")
    assert [r.get("tool_choice") for r in endpoint.requests] == ["auto", "auto"]


def test_a_reply_naming_a_tool_not_offered_is_malformed_not_an_answer(endpoint):
    endpoint.script = [completion("functions.rm_rf:"), completion("4")]
    run = run_task()
    assert [r.get("tool_choice") for r in endpoint.requests] == ["auto", "auto"]  # not asked for outright
    error_step = run.steps.get(kind=Step.Kind.MODEL_ERROR)
    assert error_step.error_class == "MalformedReply" and "not offered" in error_step.error
    assert run.final_output == "4"


def test_calls_a_chat_template_leaves_in_the_text_are_calls(endpoint):
    # llama.cpp's server on a model's own template (Qwen2.5, Hermes) passes the calls on as text.
    endpoint.script = [
        completion(
            'Computing.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
        ),
        completion("6 * 7 = 42"),
    ]
    run = run_task(text="What is 6 * 7?")
    assert run.final_output == "6 * 7 = 42"
    thought, call_step = run.steps.order_by("index")[:2]
    assert thought.kind == Step.Kind.THOUGHT and thought.thought == "Computing."
    assert call_step.tool_name == "calculator" and call_step.result["value"] == 42


def test_a_tagged_call_that_is_not_json_is_a_failed_call_not_an_answer(endpoint):
    endpoint.script = [completion('<tool_call>{"name": "calculator", "arguments": {expression: 6*7}</tool_call>'),
                       completion("I could not compute it.")]  # fmt: skip
    run = run_task(text="What is 6 * 7?")
    failed = run.steps.get(kind=Step.Kind.TOOL_CALL)
    assert not failed.success and failed.error_class == "InvalidToolCall", failed.error
    assert run.final_output == "I could not compute it."


def test_a_reply_that_is_one_json_call_of_an_offered_tool_is_a_call(endpoint):
    # What Qwen2.5-Coder-1.5B writes on its own template: the call as a fenced JSON object.
    endpoint.script = [
        completion('```json\n{"name": "calculator", "arguments": {"expression": "17 * 23 + 4"}}\n```'),
        completion('{"name": "the answer", "arguments": "none"}'),  # not a tool: an (odd) answer
    ]
    run = run_task(text="What is 17 * 23 + 4?")
    assert run.steps.get(kind=Step.Kind.TOOL_CALL).result["value"] == 395
    assert run.final_output == '{"name": "the answer", "arguments": "none"}'


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ('{"name": "update_plan", "arguments": "{\\"steps\\": [{\\"title\\": \\"Sum\\"}]}}"', "looks like a call of"),
        ('To do this:\n<tools>\n<function name="read_file" parameters={"path": "a.txt"}></function>\n</tools>',
         "wrote tool calls as text"),
    ],
)  # fmt: skip
def test_a_failed_attempt_at_a_call_is_a_malformed_reply_not_an_answer(endpoint, reply, said):
    # What Qwen2.5-Coder-1.5B wrote as "answers" on its own template; each ended a run answered.
    endpoint.script = [completion(reply), completion("4")]
    run = run_task()
    error_step = run.steps.get(kind=Step.Kind.MODEL_ERROR)
    assert error_step.error_class == "MalformedReply" and said in error_step.error
    assert run.final_output == "4"


def test_an_answer_that_mentions_a_function_in_words_stays_an_answer(endpoint):
    endpoint.script = [completion('The function "name" field holds the tool; 2 + 2 = 4.')]
    assert run_task().final_output == 'The function "name" field holds the tool; 2 + 2 = 4.'
