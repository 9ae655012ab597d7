"""The insight writer on a model: the real openai SDK against the local OpenAI-compatible server
(tests/fake_openai.py), asked through the model edge's structured answers, its call recorded and
timed with the pair, and its reply read strictly: a bad operation is ignored with its reason, a
reply that is not JSON changes nothing, an endpoint that fails leaves the pair to the rules."""

import json

import pytest

from feedback.models import InsightPair, Strategy
from feedback.strategies.insights import insights_update

from .fake_openai import completion, error
from .strategy_history import add_run

pytestmark = pytest.mark.django_db


def a_pair():
    good = add_run(kind="arithmetic", text="What is 17 * 3?", calls=[("calculator", "")])
    good.task.expected_answer = "51"
    good.task.save()
    bad = add_run(kind="arithmetic", text="What is 19 * 4?", score=0.1, calls=[])
    bad.task.expected_answer = "76"
    bad.task.save()
    return bad, good


def reply(*operations) -> dict:
    return completion(json.dumps({"operations": list(operations)}), usage=(321, 45))


def test_the_model_writes_the_operations_and_a_bad_one_is_ignored(endpoint):
    bad, good = a_pair()
    endpoint.script = [
        reply(
            {"op": "ADD", "index": 0, "text": "Call the calculator and answer with the value it returns."},
            {"op": "EXPLODE", "index": 1, "text": ""},
            {"op": "UPVOTE", "index": 7, "text": ""},
            {"op": "ADD", "index": 0, "text": "The answer is 76."},  # quotes the failure's expected answer
        )
    ]
    [strategy] = insights_update(window_days=30)
    assert [(i["text"], i["votes"]) for i in strategy.current_version.insights] == [
        ("Call the calculator and answer with the value it returns.", 2)
    ]
    pair = InsightPair.objects.get()
    assert (pair.failing_run, pair.succeeding_run, pair.writer) == (bad, good, "model")
    assert pair.operations == [
        {"op": "ADD", "index": 0, "text": "Call the calculator and answer with the value it returns."}
    ]
    reasons = [i["reason"] for i in pair.ignored]
    assert len(reasons) == 3 and reasons[0].startswith("unknown operation 'EXPLODE'")
    assert "there is no insight 7" in " ".join(reasons) and "it quotes the evidence (1 item(s))" in reasons
    # The call, recorded and timed: the model, the format the endpoint answered in, its tokens.
    assert pair.call["model"] == "test-model" and pair.call["response_format"] == "json_schema"
    assert (pair.call["tokens_in"], pair.call["tokens_out"]) == (321, 45)
    assert isinstance(pair.call["duration_ms"], int) and pair.call["duration_ms"] >= 0
    # What the model was asked: the kind's wording, the list, both trajectories (short), a schema.
    [request] = endpoint.requests
    assert request["model"] == "test-model" and request["temperature"] == 0
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["name"] == "insight_operations"
    system, user = request["messages"][0]["content"], request["messages"][1]["content"]
    assert "help an AI agent succeed at arithmetic tasks" in system and "never quote an answer" in system
    assert user.startswith("Current insights:\n(none yet)\n\nFailed attempt:\nTask: What is 19 * 4?")
    assert "Successful attempt:\nTask: What is 17 * 3?\n- calculator(" in user


def test_the_model_sees_the_numbered_list_and_edits_it(endpoint):
    a_pair()
    endpoint.script = [reply({"op": "ADD", "index": 0, "text": "Use the calculator."})]
    [strategy] = insights_update(window_days=30)
    add_run(kind="arithmetic", text="What is 23 * 4?", score=0.1, calls=[])
    endpoint.script = [reply({"op": "EDIT", "index": 1, "text": "Use the calculator for every operation."})]
    insights_update(window_days=30)
    version = strategy.versions.get(number=2)
    assert [(i["text"], i["votes"]) for i in version.insights] == [("Use the calculator for every operation.", 3)]
    assert version.insights[0]["id"] == strategy.versions.get(number=1).insights[0]["id"]
    assert "Current insights:\n1. Use the calculator. (votes: 2)\n" in endpoint.requests[-1]["messages"][1]["content"]
    changes = strategy.events.latest("pk").snapshot["changes"]
    assert changes == [
        {
            "change": "edited",
            "old_text": "Use the calculator.",
            "text": "Use the calculator for every operation.",
            "old_votes": 2,
            "votes": 3,
        }
    ]


def test_a_reply_that_is_not_json_changes_nothing_and_is_recorded(endpoint):
    a_pair()
    endpoint.script = [completion("Sure! ADD: always use the calculator {op: ADD")]
    assert insights_update(window_days=30) == []
    assert not Strategy.objects.exists()
    pair = InsightPair.objects.get()
    assert pair.writer == "model" and pair.operations == [] and pair.version is None
    assert pair.ignored[0]["operation"] == "Sure! ADD: always use the calculator {op: ADD"
    assert pair.ignored[0]["reason"].startswith("the reply is not JSON")
    # Compared once: the next pass asks nothing.
    assert insights_update(window_days=30) == [] and len(endpoint.requests) == 1


def test_an_endpoint_that_fails_leaves_the_pair_to_the_rules(endpoint):
    a_pair()
    endpoint.script = [error(401, "bad key")]
    [strategy] = insights_update(window_days=30)
    pair = InsightPair.objects.get()
    assert pair.writer == "rules" and "(401)" in pair.call["error"] and "duration_ms" in pair.call
    assert [i["text"] for i in strategy.current_version.insights] == [
        "For arithmetic tasks, call calculator and use its result before answering."
    ]


def test_the_template_setting_keeps_the_rules(endpoint, settings):
    settings.STRATEGY_PROPOSAL_WRITER = "template"
    a_pair()
    insights_update(window_days=30)
    assert endpoint.requests == [] and InsightPair.objects.get().writer == "rules"


def test_a_live_list_reaches_the_model_in_the_system_prompt(endpoint):
    from feedback.agent.loop import execute_run

    from .factories import make_run

    a_pair()
    endpoint.script = [reply({"op": "ADD", "index": 0, "text": "Call the calculator before answering."})]
    [strategy] = insights_update(window_days=30)
    Strategy.objects.filter(pk=strategy.pk).update(status=Strategy.Status.ACTIVE)
    endpoint.script = [completion("12 + 30 = 42")]
    run = make_run(text="What is 12 + 30?")
    execute_run(run.pk)
    system = endpoint.requests[-1]["messages"][0]
    assert system["role"] == "system" and system["content"].endswith(
        "Insights from comparing failed and successful runs of similar tasks (best confirmed first):\n"
        "- Call the calculator before answering."
    )
    run.refresh_from_db()
    assert run.system_prompt == system["content"]
    assert run.applied_strategies.get().strategy_version == strategy.current_version
