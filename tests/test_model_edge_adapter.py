"""The model edge: one client factory for every use, the endpoint adapter's quirks, and model-call
retries by tenacity, against the local OpenAI-compatible server (tests/fake_openai.py: real
sockets, the real openai SDK on the other side)."""

import json
import re
from pathlib import Path

import pytest
from tenacity import RetryCallState

from feedback.agent.llm import call_model, get_model
from feedback.agent.llm.calls import backoff
from feedback.agent.llm.formats import json_completion
from feedback.agent.retrieval import embedding_scores
from feedback.agent.tools import BUILTIN_TOOLS
from feedback.evaluation.judge import llm_judge
from feedback.models import Run
from feedback.strategies.proposals import mine_and_propose

from .factories import make_run
from .fake_openai import call, completion, embeddings, error
from .test_strategy_proposals import leaky_history

pytestmark = pytest.mark.django_db

KEY = "sk-the-one-key"
TOOLS = [BUILTIN_TOOLS[name].spec() for name in ("calculator", "analyze_text", "update_plan")]
ASK = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def endpoint(endpoint, settings):
    """The shared endpoint, also as the judge, with this file's key and full schemas."""
    settings.OPENAI_API_KEY = KEY
    settings.LLM_JUDGE_MODEL = "test-model"
    settings.LLM_GRAMMAR_SAFE_SCHEMAS = "off"
    return endpoint


def test_every_use_reaches_the_one_configured_endpoint_with_its_key(endpoint, settings):
    endpoint.responder = lambda body: (
        embeddings(len(body["input"]))
        if "input" in body
        else completion('{"title": "Check the answer", "guidance": "Compare the answer with the task."}')
        if "response_format" in body and body["response_format"]["type"] == "json_object" and "title" in str(body)
        else completion('{"score": 0.9, "accomplished": true, "feedback": "Right."}')
        if "response_format" in body or "grade" in str(body)
        else completion("4")
    )
    from feedback.agent.loop import execute_run

    run = make_run(text="What is 2 + 2?")
    execute_run(run.pk)  # the agent
    llm_judge(Run.objects.get(pk=run.pk), {})  # the judge
    embedding_scores("add two numbers", [BUILTIN_TOOLS["calculator"], BUILTIN_TOOLS["analyze_text"]])  # retrieval
    leaky_history()
    mine_and_propose(window_days=30)  # proposals written by the model
    paths = {path for path, _ in endpoint.received}
    assert paths == {"/v1/chat/completions", "/v1/embeddings"}
    assert {headers["authorization"] for _, headers in endpoint.received} == {f"Bearer {KEY}"}
    assert Run.objects.get(pk=run.pk).final_output == "4"
    assert any("title" in json.dumps(r.get("messages")) for r in endpoint.requests)  # proposals asked


def test_the_sdk_never_retries_behind_the_record(endpoint, settings):
    settings.LLM_MAX_ATTEMPTS = 1
    endpoint.script = [error(500, "boom"), error(500, "boom")]
    called = call_model(get_model(), ASK, TOOLS)
    assert called.error is not None and called.error.retryable
    assert len(endpoint.requests) == 1  # one attempt allowed, one request made


def _reply(endpoint, *script, tools=TOOLS, messages=ASK):
    endpoint.script = list(script)
    return get_model().complete(messages, tools)


# --- each quirk the adapter handles ----------------------------------------------------------------
def test_tools_go_with_tool_choice_and_every_content_is_a_string(endpoint):
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ]
    assert _reply(endpoint, completion("4"), messages=history).content == "4"
    sent = endpoint.requests[0]
    assert sent["tool_choice"] == "auto" and {t["function"]["name"] for t in sent["tools"]} == {
        "calculator",
        "analyze_text",
        "update_plan",
    }
    assert all(isinstance(m["content"], str) for m in sent["messages"])


def test_calls_left_in_the_text_are_calls(endpoint):
    tagged = _reply(
        endpoint, completion('Sum.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>')
    )
    assert (tagged.content, [(c.name, json.loads(c.arguments)) for c in tagged.tool_calls]) == (
        "Sum.",
        [("calculator", {"expression": "2+2"})],
    )
    fenced = _reply(endpoint, completion('```json\n{"name": "calculator", "arguments": {"expression": "3*3"}}\n```'))
    assert [c.name for c in fenced.tool_calls] == ["calculator"] and fenced.content == ""
    # Run 9 on the local model: a plan narrated around its calls, each in a code block, had ended
    # the triage as its answer.
    narrated = _reply(
        endpoint,
        completion(
            "I'll follow these steps:\n1. Count the words.\n2. Add them up.\n\n```json\n"
            '{"name": "analyze_text", "arguments": {"path": "inbox/001.txt"}}\n```\n\nThen:\n```json\n'
            '{\n  "name": "calculator",\n  "arguments": {"expression": "3+4"}\n}\n```\n'
            "After adding them up, I'll give the final answer."
        ),
    )
    assert [(c.name, json.loads(c.arguments)) for c in narrated.tool_calls] == [
        ("analyze_text", {"path": "inbox/001.txt"}),
        ("calculator", {"expression": "3+4"}),
    ]
    assert narrated.content.startswith("I'll follow these steps:") and "```" not in narrated.content
    # Code blocks that are not all calls of offered tools leave the reply an answer.
    for text in (
        'The result:\n```json\n{"total": 4}\n```',
        'Try:\n```json\n{"name": "rm_rf", "arguments": {}}\n```',
    ):
        answer = _reply(endpoint, completion(text))
        assert answer.tool_calls == [] and answer.content == text
    not_a_tool = _reply(endpoint, completion('{"name": "the answer", "arguments": "none"}'))
    assert not_a_tool.tool_calls == [] and not not_a_tool.unusable  # an (odd) answer


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"name": "update_plan", "arguments": {steps: []}', "looks like a call of update_plan"),
        ('<tools><function name="calculator"></function></tools>', "wrote tool calls as text"),
        # Run 7 on the local model: a tag named after the tool, which had become the run's answer.
        ('<update_plan steps=[{"title": "Count lines", "status": "completed"}]}', "wrote tool calls as text"),
        ("functions.rm_rf:", "named a tool that is not offered"),
        # Runs 1 and 9 on the local model: a result of its own making, which had become the answer.
        ('<tool_response>\n{"ok": true, "result": {"value": 171}}\n</tool_response>', "wrote a tool's response"),
        ('The total is:\n<tool_response> {"ok": false, "error": "No such file"}', "wrote a tool's response"),
    ],
)
def test_text_that_looks_like_a_call_and_is_none_is_unusable(endpoint, text, reason):
    reply = _reply(endpoint, completion(text))
    assert reason in reply.unusable and reply.tool_calls == []
    assert len(endpoint.requests) == 1


def test_a_tool_chosen_in_the_text_is_asked_for_outright(endpoint):
    reply = _reply(
        endpoint,
        completion("functions.calculator:", usage=(40, 3)),
        completion(tool_calls=[call("calculator", {"expression": "2+2"})], usage=(41, 9)),
    )
    assert [c.name for c in reply.tool_calls] == ["calculator"] and (reply.tokens_in, reply.tokens_out) == (81, 12)
    assert endpoint.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "calculator"}}


FILE_TOOLS = [BUILTIN_TOOLS[name].spec() for name in ("list_directory", "read_text_file", "calculator", "update_plan")]
FAILED_READ = {"id": "c1", "type": "function", "function": {"name": "read_text_file", "arguments": '{"path": "r.txt"}'}}
READ_FAILED = [
    {"role": "user", "content": "Summarise release-notes.txt"},
    {"role": "assistant", "content": "", "tool_calls": [FAILED_READ]},
    {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"ok": False, "error": "No such file: 'r.txt'."})},
    {"role": "user", "content": "Reflection on the last step: ..."},
]
FORCED_READ = {"type": "function", "function": {"name": "read_text_file"}}


def test_an_action_announced_after_a_failed_call_is_asked_for_outright(endpoint):
    reply = _reply(
        endpoint,
        completion('To resolve the issue, I will read the file named "docs/release-notes.txt" from the docs folder.'),
        completion(tool_calls=[call("read_text_file", {"path": "docs/release-notes.txt"})]),
        tools=FILE_TOOLS,
        messages=READ_FAILED,
    )
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("read_text_file", {"path": "docs/release-notes.txt"})
    ]
    assert endpoint.requests[1]["tool_choice"] == FORCED_READ


@pytest.mark.parametrize(
    "answer",
    [
        # Announced after the first sentence: "let me know" closes answers.
        "There is no release-notes.txt in the workspace. Let me know if you meant another file.",
        "I will answer from what I have: there is no release-notes.txt.",  # no offered tool answers
        "Let me check: I'll read docs/release-notes.txt.",  # "check" is no one tool's verb
    ],
)
def test_an_answer_after_a_failed_call_stays_an_answer(endpoint, answer):
    reply = _reply(endpoint, completion(answer), tools=FILE_TOOLS, messages=READ_FAILED)
    assert (reply.content, reply.tool_calls, reply.unusable) == (answer, [], "")
    assert len(endpoint.requests) == 1


def test_an_announcement_is_an_answer_when_no_call_has_failed(endpoint):
    worked = [*READ_FAILED[:2], {**READ_FAILED[2], "content": json.dumps({"ok": True, "result": {"text": "v2"}})}]
    answer = "I will summarise it: the release notes announce version 2."
    reply = _reply(endpoint, completion(answer), tools=FILE_TOOLS, messages=worked)
    assert (reply.content, reply.tool_calls) == (answer, []) and len(endpoint.requests) == 1


def test_a_reply_cut_off_at_the_length_limit_is_unusable(endpoint, settings):
    settings.LLM_MAX_TOKENS = 32
    cut = completion(tool_calls=[call("calculator", '{"expression": "1 + ')])
    cut["choices"][0]["finish_reason"] = "length"
    reply = _reply(endpoint, cut)
    assert reply.unusable == "Your reply was cut off at the length limit of 32 tokens: reply more briefly."
    assert endpoint.requests[0]["max_tokens"] == 32


def test_grammar_safe_schemas_leave_out_the_bounds(endpoint, settings):
    settings.LLM_GRAMMAR_SAFE_SCHEMAS = "on"
    _reply(endpoint, completion("4"))
    sent = json.dumps(endpoint.requests[0]["tools"])
    assert "maxLength" not in sent and '"expression"' in sent
    settings.LLM_GRAMMAR_SAFE_SCHEMAS = "off"
    _reply(endpoint, completion("4"))
    assert "maxLength" in json.dumps(endpoint.requests[1]["tools"])


def test_an_endpoint_refusing_tools_gets_json_replies_for_good(endpoint):
    model = get_model()
    endpoint.script = [
        error(400, "this model does not support tools"),
        completion('{"final_answer": "4"}'),
        completion('Sure, it is "4"'),
    ]
    assert model.complete(ASK, TOOLS).content == "4"
    second = model.complete(ASK, TOOLS)  # no tools asked for again
    assert "not valid JSON" in second.unusable
    assert ["tools" in r for r in endpoint.requests] == [True, False, False]
    assert "Reply with ONE JSON object" in endpoint.requests[1]["messages"][0]["content"]


def test_json_answers_fall_back_from_refused_formats_and_remember_them(endpoint):
    def refuse_schema(body):
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return error(500, "json_schema is not supported")
        return completion('Here: {"ok": true}')

    endpoint.responder = refuse_schema
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = json_completion(model="fmt-model", messages=ASK, schema=schema, name="check")
    assert (answer.response_format, answer.refused, answer.text) == (
        "json_object",
        ["json_schema: 500"],
        'Here: {"ok": true}',
    )
    again = json_completion(model="fmt-model", messages=ASK, schema=schema, name="check")
    assert again.response_format == "json_object" and len(endpoint.requests) == 3  # not asked for the schema again


# --- retries by tenacity ---------------------------------------------------------------------------
def test_a_transient_error_is_retried_and_each_attempt_recorded(endpoint):
    endpoint.script = [error(429, "slow down"), error(503, "busy"), completion("4")]
    called = call_model(get_model(), ASK, TOOLS)
    assert called.reply.content == "4" and called.error is None
    assert [(a.number, a.retryable, bool(a.error)) for a in called.attempts] == [
        (1, True, True),
        (2, True, True),
        (3, False, False),
    ]
    assert "RateLimitError (429)" in called.attempts[0].error
    starts = [a.started_at for a in called.attempts]
    assert called.started_at <= starts[0] < starts[1] < starts[2] <= called.finished_at


def test_an_error_that_is_not_transient_is_not_retried(endpoint):
    endpoint.script = [error(401, "bad key"), completion("4")]
    called = call_model(get_model(), ASK, TOOLS)
    assert called.reply is None and "(401)" in str(called.error)
    assert [(a.number, a.retryable) for a in called.attempts] == [(1, False)] and len(endpoint.requests) == 1


def test_giving_up_after_the_configured_attempts(endpoint, settings):
    settings.LLM_MAX_ATTEMPTS = 2
    endpoint.script = [error(500, "boom")] * 3
    called = call_model(get_model(), ASK, TOOLS)
    assert "InternalServerError (500)" in str(called.error) and len(called.attempts) == 2
    assert len(endpoint.requests) == 2


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_the_backoff_doubles_with_half_of_it_random(attempt):
    state = RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    waits = [backoff(1.0)(state) for _ in range(200)]
    full = 2 ** (attempt - 1)
    assert all(full / 2 <= w <= full for w in waits)
    assert max(waits) - min(waits) > full / 10  # jittered, not fixed


# --- the loop knows nothing of one model ----------------------------------------------------------
def test_no_module_outside_the_adapter_knows_a_model_or_its_formats():
    root = Path(__file__).resolve().parent.parent / "feedback"
    wording = re.compile(r"qwen|llama|hermes|smollm|chatml|<tool_call>|functions\.\w+:|tool_choice", re.I)
    found = [
        f"{path.relative_to(root)}: {match.group(0)}"
        for folder in ("agent", "strategies", "evaluation")
        for path in (root / folder).rglob("*.py")
        if "llm" not in path.relative_to(root).parts
        for match in wording.finditer(path.read_text())
    ]
    assert found == []
